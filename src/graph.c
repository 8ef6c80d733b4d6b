/* graph.c — capture: the op table, dtypes, and the lazy graph builder. */
#include "cf_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- op and dtype tables -------------------------------------------------- */

static const struct {
    const char *kw;
    int arity;
    cf_op_class cls;
} op_table[] = {
#define CF_OP_ROW_(e, kw, arity, cls) {kw, arity, cls},
    CF_OPS(CF_OP_ROW_)
#undef CF_OP_ROW_
};
_Static_assert(CF_ARRAY_LEN(op_table) == CF_OP_COUNT, "op_table out of sync with CF_OPS");

const char *cf_op_name(cf_op op) { return (unsigned)op < CF_OP_COUNT ? op_table[op].kw : "?"; }
cf_op_class cf_op_class_of(cf_op op) { return op_table[op].cls; }
int cf_op_arity(cf_op op) { return op_table[op].arity; }

int cf_op_lookup(const char *kw, int arity)
{
    for (int i = 0; i < CF_OP_COUNT; i++)
        if (op_table[i].cls != CF_OPC_LEAF && op_table[i].arity == arity &&
            strcmp(op_table[i].kw, kw) == 0)
            return i;
    return -1;
}

static const char *const dtype_names[] = {"bf16", "f16", "f32"};
static const size_t dtype_sizes[] = {2, 2, 4};
_Static_assert(CF_ARRAY_LEN(dtype_names) == CF_DTYPE_COUNT, "dtype_names out of sync");

const char *cf_dtype_name(cf_dtype t) { return (unsigned)t < CF_DTYPE_COUNT ? dtype_names[t] : "?"; }
size_t cf_dtype_size(cf_dtype t) { return (unsigned)t < CF_DTYPE_COUNT ? dtype_sizes[t] : 0; }

/* ---- scalar semantics ------------------------------------------------------ */

double cf_eval_unary(cf_op op, double x)
{
    switch (op) {
    case CF_OP_NEG: return -x;
    case CF_OP_ABS: return fabs(x);
    case CF_OP_EXP: return exp(x);
    case CF_OP_LOG: return log(x);
    case CF_OP_SQRT: return sqrt(x);
    case CF_OP_RSQRT: return 1.0 / sqrt(x);
    case CF_OP_SQUARE: return x * x;
    case CF_OP_RECIP: return 1.0 / x;
    case CF_OP_RELU: return x < 0 ? 0.0 : x; /* NaN stays NaN */
    case CF_OP_GELU: {
        const double k = 0.7978845608028654; /* sqrt(2/pi) */
        return 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
    }
    case CF_OP_GELU_ERF: return 0.5 * x * (1.0 + erf(x * 0.7071067811865476));
    case CF_OP_SILU: return x / (1.0 + exp(-x));
    case CF_OP_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case CF_OP_TANH: return tanh(x);
    default: CF_ASSERT(!"not a unary op");
    }
}

double cf_eval_binary(cf_op op, double a, double b)
{
    switch (op) {
    case CF_OP_ADD: return a + b;
    case CF_OP_SUB: return a - b;
    case CF_OP_MUL: return a * b;
    case CF_OP_DIV: return a / b;
    /* NaN-propagating; symmetric on signed zeros (+0 is the max, -0 the min),
     * so CSE may reorder the operands of these commutative ops freely. */
    case CF_OP_MAX: return (isnan(a) || isnan(b)) ? NAN : a == b ? (signbit(a) ? b : a) : (a > b ? a : b);
    case CF_OP_MIN: return (isnan(a) || isnan(b)) ? NAN : a == b ? (signbit(a) ? a : b) : (a < b ? a : b);
    case CF_OP_POW: return pow(a, b);
    default: CF_ASSERT(!"not a binary op");
    }
}

/* ---- host half-precision conversions -------------------------------------- */

uint16_t cf_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float cf_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t cf_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u);
    if (absu >= 0x477ff000u) /* rounds to >= 65520: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (absu < 0x38800000u) { /* subnormal or zero in f16 */
        float af;
        memcpy(&af, &absu, 4);
        /* scale so that one f16 subnormal ulp (2^-24) becomes 1, round to even */
        float scaled = af * 16777216.0f;
        uint32_t m = (uint32_t)scaled;
        float rem = scaled - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1)))
            m++;
        return (uint16_t)(sign | m);
    }
    uint32_t exp = (absu >> 23) - 127 + 15;
    uint32_t mant = absu & 0x7fffffu;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

float cf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        float f = (float)mant / 16777216.0f; /* mant * 2^-24 */
        memcpy(&u, &f, 4);
        u |= sign;
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp - 15 + 127) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- the builder ----------------------------------------------------------- */

cf_graph *cf_graph_new(void)
{
    cf_graph *g = calloc(1, sizeof *g);
    if (g)
        g->arena.limit = 64u << 20;
    return g;
}

void cf_graph_free(cf_graph *g)
{
    if (!g)
        return;
    cf_arena_free(&g->arena);
    free(g->nodes);
    free(g->inputs);
    free(g->params);
    free(g->outputs);
    free(g);
}

const cf_error *cf_graph_error(const cf_graph *g) { return &g->err; }
void cf_graph_set_loc(cf_graph *g, cf_loc loc) { g->cur_loc = loc; }

const cf_node *cf_graph_node(const cf_graph *g, cf_value v)
{
    return (v >= 0 && v < g->n_nodes) ? &g->nodes[v] : NULL;
}

const char *cf_graph_node_name(const cf_graph *g, cf_value v, char *buf, size_t n)
{
    const cf_node *nd = cf_graph_node(g, v);
    if (!nd)
        snprintf(buf, n, "<invalid>");
    else if (nd->name)
        snprintf(buf, n, "%s", nd->name);
    else if (nd->op == CF_OP_CONST)
        snprintf(buf, n, "%g", nd->cval);
    else
        snprintf(buf, n, "%s.%d", cf_op_name(nd->op), v);
    return buf;
}

/* Records the first error; later ones are dropped (the first is the cause). */
__attribute__((format(printf, 3, 4)))
static cf_value fail(cf_graph *g, cf_status st, const char *fmt, ...)
{
    if (g->err.status != CF_OK)
        return -1;
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cf_errorf(&g->err, st, g->cur_loc, "%s", msg);
    return -1;
}

static bool grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return true;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q)
        return false;
    *p = q;
    *cap = nc;
    return true;
}

static cf_value add_node(cf_graph *g, const cf_node *proto)
{
    if (g->n_nodes >= CF_GRAPH_MAX_NODES)
        return fail(g, CF_ERR_INVALID_ARG, "graph too large: more than %d nodes", CF_GRAPH_MAX_NODES);
    if (!grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes))
        return fail(g, CF_ERR_NO_MEMORY, "out of memory adding a graph node");
    cf_node *n = &g->nodes[g->n_nodes];
    *n = *proto;
    n->loc = g->cur_loc;
    return g->n_nodes++;
}

static bool valid(cf_graph *g, cf_value v)
{
    if (g->err.status != CF_OK)
        return false; /* propagate silently: the first error is already recorded */
    if (v < 0 || v >= g->n_nodes) {
        fail(g, CF_ERR_INVALID_ARG, "invalid value handle %d", (int)v);
        return false;
    }
    return true;
}

static bool valid_name(cf_graph *g, const char *name, const char *what)
{
    if (!name || !*name || strlen(name) >= CF_MAX_NAME) {
        fail(g, CF_ERR_INVALID_ARG, "%s name must have 1 to %d characters", what, CF_MAX_NAME - 1);
        return false;
    }
    for (int i = 0; i < g->n_inputs; i++)
        if (strcmp(g->nodes[g->inputs[i]].name, name) == 0) {
            fail(g, CF_ERR_INVALID_ARG, "%s name '%s' is already used by an input", what, name);
            return false;
        }
    for (int i = 0; i < g->n_params; i++)
        if (strcmp(g->nodes[g->params[i]].name, name) == 0) {
            fail(g, CF_ERR_INVALID_ARG, "%s name '%s' is already used by a param", what, name);
            return false;
        }
    for (int i = 0; i < g->n_outputs; i++)
        if (strcmp(g->outputs[i].name, name) == 0) {
            fail(g, CF_ERR_INVALID_ARG, "%s name '%s' is already used by an output", what, name);
            return false;
        }
    return true;
}

cf_dim cf_graph_dim(cf_graph *g, const char *name)
{
    if (g->err.status != CF_OK)
        return -1;
    if (!name || !*name || strlen(name) >= CF_MAX_NAME)
        return fail(g, CF_ERR_INVALID_ARG, "dim name must have 1 to %d characters", CF_MAX_NAME - 1);
    for (int i = 0; i < g->n_dims; i++)
        if (strcmp(g->dim_names[i], name) == 0)
            return i;
    if (g->n_dims >= CF_MAX_DIMS)
        return fail(g, CF_ERR_INVALID_ARG, "too many dims (at most %d)", CF_MAX_DIMS);
    const char *s = cf_arena_strdup(&g->arena, name);
    if (!s)
        return fail(g, CF_ERR_NO_MEMORY, "out of memory");
    g->dim_names[g->n_dims] = s;
    return g->n_dims++;
}

static const char *dim_name(const cf_graph *g, cf_dim d)
{
    return (d >= 0 && d < g->n_dims) ? g->dim_names[d] : "?";
}

/* "[M, N]" for error messages. */
static const char *shape_str(const cf_graph *g, const cf_node *n, char *buf, size_t len)
{
    if (n->rank == 0)
        snprintf(buf, len, "scalar");
    else if (n->rank == 1)
        snprintf(buf, len, "[%s]", dim_name(g, n->dims[0]));
    else
        snprintf(buf, len, "[%s, %s]", dim_name(g, n->dims[0]), dim_name(g, n->dims[1]));
    return buf;
}

cf_value cf_graph_input(cf_graph *g, const char *name, cf_dtype t, int rank, const cf_dim *dims)
{
    if (g->err.status != CF_OK || !valid_name(g, name, "input"))
        return -1;
    if ((unsigned)t >= CF_DTYPE_COUNT)
        return fail(g, CF_ERR_DTYPE, "input '%s': unknown dtype %d", name, (int)t);
    if (rank < 1 || rank > 2)
        return fail(g, CF_ERR_SHAPE, "input '%s': rank %d is not supported (inputs have rank 1 or 2)",
                    name, rank);
    for (int i = 0; i < rank; i++)
        if (dims[i] < 0 || dims[i] >= g->n_dims)
            return fail(g, CF_ERR_INVALID_ARG, "input '%s': invalid dim handle %d", name, (int)dims[i]);
    if (!grow((void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1, sizeof *g->inputs))
        return fail(g, CF_ERR_NO_MEMORY, "out of memory");
    cf_node n = {.op = CF_OP_INPUT, .rank = rank, .dtype = t, .src = {-1, -1}, .index = g->n_inputs};
    for (int i = 0; i < rank; i++)
        n.dims[i] = dims[i];
    n.name = cf_arena_strdup(&g->arena, name);
    if (!n.name)
        return fail(g, CF_ERR_NO_MEMORY, "out of memory");
    cf_value v = add_node(g, &n);
    if (v >= 0)
        g->inputs[g->n_inputs++] = v;
    return v;
}

cf_value cf_graph_const(cf_graph *g, double c)
{
    if (g->err.status != CF_OK)
        return -1;
    /* the kernels compute in f32: every stage (reference, interpreter, codegen) takes the
     * constant as f32 rounds it (1e39 is inf, 7e-46 is 0), so the reference agrees */
    cf_node n = {.op = CF_OP_CONST, .dtype = CF_F32, .src = {-1, -1}, .cval = (double)(float)c};
    return add_node(g, &n);
}

cf_value cf_graph_param(cf_graph *g, const char *name)
{
    if (g->err.status != CF_OK || !valid_name(g, name, "param"))
        return -1;
    if (!grow((void **)&g->params, &g->cap_params, g->n_params + 1, sizeof *g->params))
        return fail(g, CF_ERR_NO_MEMORY, "out of memory");
    cf_node n = {.op = CF_OP_PARAM, .dtype = CF_F32, .src = {-1, -1}, .index = g->n_params};
    n.name = cf_arena_strdup(&g->arena, name);
    if (!n.name)
        return fail(g, CF_ERR_NO_MEMORY, "out of memory");
    cf_value v = add_node(g, &n);
    if (v >= 0)
        g->params[g->n_params++] = v;
    return v;
}

cf_value cf_graph_matmul(cf_graph *g, cf_value a, cf_value b)
{
    if (!valid(g, a) || !valid(g, b))
        return -1;
    const cf_node *na = &g->nodes[a], *nb = &g->nodes[b];
    char sa[80], sb[80], n1[80], n2[80];
    if (na->rank != 2 || nb->rank != 2)
        return fail(g, CF_ERR_SHAPE, "matmul(%s, %s): both operands must be matrices, got %s and %s",
                    cf_graph_node_name(g, a, n1, sizeof n1), cf_graph_node_name(g, b, n2, sizeof n2),
                    shape_str(g, na, sa, sizeof sa), shape_str(g, nb, sb, sizeof sb));
    cf_node n = {.op = CF_OP_MATMUL, .rank = 2, .dtype = CF_F32, .src = {a, b}};
    n.dims[0] = na->dims[0];
    if (nb->dims[0] == na->dims[1]) { /* [K,N] */
        n.dims[1] = nb->dims[1];
        n.axis = 0;
    } else if (nb->dims[1] == na->dims[1]) { /* [N,K], nn.Linear */
        n.dims[1] = nb->dims[0];
        n.axis = 1;
    } else {
        return fail(g, CF_ERR_SHAPE,
                    "matmul(%s, %s): %s and %s do not share the contraction dim %s "
                    "(the weight must be [%s, N] or [N, %s])",
                    cf_graph_node_name(g, a, n1, sizeof n1), cf_graph_node_name(g, b, n2, sizeof n2),
                    shape_str(g, na, sa, sizeof sa), shape_str(g, nb, sb, sizeof sb),
                    dim_name(g, na->dims[1]), dim_name(g, na->dims[1]), dim_name(g, na->dims[1]));
    }
    if (n.dims[0] == n.dims[1])
        return fail(g, CF_ERR_SHAPE,
                    "matmul(%s, %s): the output's rows and columns use the same dim %s; "
                    "give them distinct dims so broadcasts are unambiguous",
                    cf_graph_node_name(g, a, n1, sizeof n1), cf_graph_node_name(g, b, n2, sizeof n2),
                    dim_name(g, n.dims[0]));
    return add_node(g, &n);
}

cf_value cf_graph_unary(cf_graph *g, cf_op op, cf_value x)
{
    if (!valid(g, x))
        return -1;
    if ((unsigned)op >= CF_OP_COUNT || op_table[op].cls != CF_OPC_UNARY)
        return fail(g, CF_ERR_INVALID_ARG, "op %d is not a unary elementwise op", (int)op);
    const cf_node *nx = &g->nodes[x];
    cf_node n = {.op = op, .rank = nx->rank, .dtype = CF_F32, .src = {x, -1}};
    n.dims[0] = nx->dims[0];
    n.dims[1] = nx->dims[1];
    return add_node(g, &n);
}

cf_value cf_graph_binary(cf_graph *g, cf_op op, cf_value a, cf_value b)
{
    if (!valid(g, a) || !valid(g, b))
        return -1;
    if ((unsigned)op >= CF_OP_COUNT || op_table[op].cls != CF_OPC_BINARY)
        return fail(g, CF_ERR_INVALID_ARG, "op %d is not a binary elementwise op", (int)op);
    const cf_node *na = &g->nodes[a], *nb = &g->nodes[b];
    char sa[80], sb[80], n1[80], n2[80];
    cf_node n = {.op = op, .dtype = CF_F32, .src = {a, b}};
    if (op == CF_OP_POW && nb->rank != 0)
        return fail(g, CF_ERR_SHAPE, "pow(%s, %s): the exponent must be a scalar, got %s",
                    cf_graph_node_name(g, a, n1, sizeof n1), cf_graph_node_name(g, b, n2, sizeof n2),
                    shape_str(g, nb, sb, sizeof sb));
    const cf_node *hi = na->rank >= nb->rank ? na : nb, *lo = na->rank >= nb->rank ? nb : na;
    n.rank = hi->rank;
    n.dims[0] = hi->dims[0];
    n.dims[1] = hi->dims[1];
    bool ok = true;
    if (lo->rank == 0) {
        /* scalars broadcast against anything */
    } else if (lo->rank == hi->rank) {
        ok = lo->dims[0] == hi->dims[0] && (lo->rank == 1 || lo->dims[1] == hi->dims[1]);
    } else { /* a vector against a matrix: it spans whichever dim it names */
        if (hi->dims[0] == hi->dims[1])
            return fail(g, CF_ERR_SHAPE, "%s(%s, %s): cannot tell whether the vector %s broadcasts over "
                        "rows or columns of %s",
                        cf_op_name(op), cf_graph_node_name(g, a, n1, sizeof n1),
                        cf_graph_node_name(g, b, n2, sizeof n2), shape_str(g, lo, sa, sizeof sa),
                        shape_str(g, hi, sb, sizeof sb));
        ok = lo->dims[0] == hi->dims[0] || lo->dims[0] == hi->dims[1];
    }
    if (!ok)
        return fail(g, CF_ERR_SHAPE, "%s(%s, %s): shapes %s and %s do not broadcast",
                    cf_op_name(op), cf_graph_node_name(g, a, n1, sizeof n1),
                    cf_graph_node_name(g, b, n2, sizeof n2), shape_str(g, na, sa, sizeof sa),
                    shape_str(g, nb, sb, sizeof sb));
    return add_node(g, &n);
}

cf_value cf_graph_reduce(cf_graph *g, cf_op op, cf_value x, int axis)
{
    if (!valid(g, x))
        return -1;
    if ((unsigned)op >= CF_OP_COUNT || op_table[op].cls != CF_OPC_REDUCE)
        return fail(g, CF_ERR_INVALID_ARG, "op %d is not a reduction", (int)op);
    const cf_node *nx = &g->nodes[x];
    char s[80], n1[80];
    if (nx->rank != 2)
        return fail(g, CF_ERR_SHAPE, "%s(%s): reductions take a matrix, got %s", cf_op_name(op),
                    cf_graph_node_name(g, x, n1, sizeof n1), shape_str(g, nx, s, sizeof s));
    if (axis == -1)
        axis = 1;
    if (axis != 0 && axis != 1)
        return fail(g, CF_ERR_SHAPE, "%s(%s): axis %d out of range for a matrix", cf_op_name(op),
                    cf_graph_node_name(g, x, n1, sizeof n1), axis);
    cf_node n = {.op = op, .rank = 1, .dtype = CF_F32, .src = {x, -1}, .axis = axis};
    n.dims[0] = nx->dims[1 - axis];
    return add_node(g, &n);
}

cf_value cf_graph_transpose(cf_graph *g, cf_value x)
{
    if (!valid(g, x))
        return -1;
    const cf_node *nx = &g->nodes[x];
    char s[80], n1[80];
    if (nx->rank != 2)
        return fail(g, CF_ERR_SHAPE, "transpose(%s): needs a matrix, got %s",
                    cf_graph_node_name(g, x, n1, sizeof n1), shape_str(g, nx, s, sizeof s));
    cf_node n = {.op = CF_OP_TRANSPOSE, .rank = 2, .dtype = CF_F32, .src = {x, -1}};
    n.dims[0] = nx->dims[1];
    n.dims[1] = nx->dims[0];
    return add_node(g, &n);
}

cf_status cf_graph_output(cf_graph *g, const char *name, cf_value v, cf_dtype t)
{
    if (!valid(g, v) || !valid_name(g, name, "output"))
        return g->err.status;
    if ((unsigned)t >= CF_DTYPE_COUNT)
        return fail(g, CF_ERR_DTYPE, "output '%s': unknown dtype %d", name, (int)t), g->err.status;
    if (!grow((void **)&g->outputs, &g->cap_outputs, g->n_outputs + 1, sizeof *g->outputs))
        return fail(g, CF_ERR_NO_MEMORY, "out of memory"), g->err.status;
    const char *s = cf_arena_strdup(&g->arena, name);
    if (!s)
        return fail(g, CF_ERR_NO_MEMORY, "out of memory"), g->err.status;
    g->outputs[g->n_outputs++] = (cf_output){.name = s, .value = v, .dtype = t, .loc = g->cur_loc};
    return CF_OK;
}

cf_status cf_graph_set_name(cf_graph *g, cf_value v, const char *name)
{
    if (!valid(g, v))
        return g->err.status;
    if (!name || !*name || strlen(name) >= CF_MAX_NAME)
        return fail(g, CF_ERR_INVALID_ARG, "node name must have 1 to %d characters", CF_MAX_NAME - 1),
               g->err.status;
    cf_node *n = &g->nodes[v];
    if (n->op == CF_OP_INPUT || n->op == CF_OP_PARAM)
        return CF_OK; /* a declared name wins */
    n->name = cf_arena_strdup(&g->arena, name);
    return n->name ? CF_OK : (fail(g, CF_ERR_NO_MEMORY, "out of memory"), g->err.status);
}

int cf_graph_num_dims(const cf_graph *g) { return g->n_dims; }
const char *cf_graph_dim_name(const cf_graph *g, cf_dim d) { return dim_name(g, d); }
int cf_graph_num_inputs(const cf_graph *g) { return g->n_inputs; }
int cf_graph_num_params(const cf_graph *g) { return g->n_params; }
int cf_graph_num_outputs(const cf_graph *g) { return g->n_outputs; }

cf_tensor_info cf_graph_input_info(const cf_graph *g, int i)
{
    cf_tensor_info t = {0};
    if (i < 0 || i >= g->n_inputs)
        return t;
    const cf_node *n = &g->nodes[g->inputs[i]];
    t.name = n->name;
    t.dtype = n->dtype;
    t.rank = n->rank;
    t.dims[0] = n->dims[0];
    t.dims[1] = n->dims[1];
    return t;
}

const char *cf_graph_param_name(const cf_graph *g, int i)
{
    return (i >= 0 && i < g->n_params) ? g->nodes[g->params[i]].name : NULL;
}

cf_tensor_info cf_graph_output_info(const cf_graph *g, int i)
{
    cf_tensor_info t = {0};
    if (i < 0 || i >= g->n_outputs)
        return t;
    const cf_output *o = &g->outputs[i];
    const cf_node *n = &g->nodes[o->value];
    t.name = o->name;
    t.dtype = o->dtype;
    t.rank = n->rank;
    t.dims[0] = n->dims[0];
    t.dims[1] = n->dims[1];
    return t;
}

cf_status cf_tensor_bytes(const cf_graph *g, cf_tensor_info t, const int64_t *dims, size_t elem_size,
                          size_t *bytes, cf_error *err)
{
    char shape[160] = "";
    size_t n = elem_size, used = 0;
    bool bad = false;
    for (int d = 0; d < t.rank; d++) {
        int64_t v = dims[t.dims[d]];
        int w = snprintf(shape + used, sizeof shape - used, "%s%s=%lld", d ? ", " : "", dim_name(g, t.dims[d]),
                         (long long)v);
        used += w > 0 && (size_t)w < sizeof shape - used ? (size_t)w : 0;
        /* every later use indexes with size_t and ptrdiff_t: keep the product below both */
        bad = bad || v <= 0 || (uint64_t)v > PTRDIFF_MAX || __builtin_mul_overflow(n, (size_t)v, &n) ||
              n > PTRDIFF_MAX;
    }
    if (bad)
        return cf_errorf(err, CF_ERR_SHAPE, (cf_loc){0},
                         "tensor '%s' [%s] of %zu-byte elements: its size in bytes overflows (or a dim is not "
                         "positive); give smaller dims",
                         t.name ? t.name : "?", shape, elem_size);
    *bytes = n;
    return CF_OK;
}
