/* test_b2b.c — b2b.c: a B2B graph as two fused kernels, S through global memory.
 *
 * On the CPU: the split gives two valid single-GEMM IRs that hand S [M, N1] (and per-row values
 * of the first epilogue) from one to the other; both kernels compile with NVRTC at the
 * workloads' B2B shapes and at shapes that are not multiples of a tile; graphs the split cannot
 * run are declined with the reason.  Then, re-executed on the stand-in driver
 * (tests/fake_cuda.c, as test_kernel is): a launch is two kernel launches over one S buffer the
 * object owns, allocated once per size. */
#include "cf_internal.h"
#include "test_util.h"

#include <dlfcn.h>
#include <unistd.h>

static cf_graph *parse(const char *path)
{
    cf_graph *g = NULL;
    cf_error err;
    if (cf_spec_parse_file(path, &g, &err) != CF_OK) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        CHECK(!"parse");
    }
    return g;
}

/* dims[] of g for "M,K,N1,N2" (the B2B specs' dims). */
static void b2b_dims(cf_graph *g, int64_t M, int64_t K, int64_t N1, int64_t N2, int64_t *dims)
{
    memset(dims, 0, CF_MAX_DIMS * sizeof *dims);
    dims[cf_graph_dim(g, "M")] = M;
    dims[cf_graph_dim(g, "K")] = K;
    dims[cf_graph_dim(g, "N1")] = N1;
    dims[cf_graph_dim(g, "N2")] = N2;
}

static int count_of(const char *text, const char *what)
{
    int n = 0;
    for (const char *p = text ? strstr(text, what) : NULL; p; p = strstr(p + 1, what))
        n++;
    return n;
}

static const cf_ir_arg *arg_of(const cf_ir *ir, cf_arg_kind kind)
{
    for (int i = 0; i < ir->n_args; i++)
        if (ir->args[i].kind == kind)
            return &ir->args[i];
    return NULL;
}

/* The IRs of the two kernels: each valid and single-GEMM, kernel 1 over [M, N1] storing S in
 * bf16, kernel 2 reading it as its GEMM's left operand [M, N1] against W2 in W2's layout. */
static void check_parts(cf_graph *g, const cf_kernel *k, bool w2_nk)
{
    const cf_b2b *b = cf_kernel_b2b(k);
    CHECK(b != NULL);
    if (!b)
        return;
    const cf_dim M = cf_graph_dim(g, "M"), K = cf_graph_dim(g, "K"), N1 = cf_graph_dim(g, "N1"),
                 N2 = cf_graph_dim(g, "N2");
    const cf_ir *p0 = cf_kernel_ir(cf_b2b_part(b, 0)), *p1 = cf_kernel_ir(cf_b2b_part(b, 1));
    cf_error err;
    for (int i = 0; i < 2; i++) {
        const cf_ir *p = i ? p1 : p0;
        CHECK_EQ_INT(CF_OK, cf_ir_verify(p, &err));
        CHECK_EQ_INT(1, p->n_gemms);
        CHECK(!p->dual);
        CHECK(cf_kernel_b2b(cf_b2b_part(b, i)) == NULL);   /* ordinary fused kernels */
    }
    CHECK(p0->dim_m == M && p0->dim_k == K && p0->dim_n == N1);
    CHECK(p1->dim_m == M && p1->dim_k == N1 && p1->dim_n == N2);
    int s_outputs = 0;   /* kernel 1's bf16 [M, N1] outputs: S */
    for (int i = 0; i < cf_graph_num_outputs(p0->graph); i++) {
        cf_tensor_info t = cf_graph_output_info(p0->graph, i);
        s_outputs += t.rank == 2 && t.dtype == CF_BF16 && t.dims[0] == M && t.dims[1] == N1;
    }
    CHECK_EQ_INT(1, s_outputs);
    const cf_ir_arg *a = arg_of(p1, CF_ARG_GEMM_A), *w = arg_of(p1, CF_ARG_GEMM_B);
    CHECK(a && w);
    if (a && w) {
        cf_tensor_info ta = cf_graph_input_info(p1->graph, a->index);
        CHECK(ta.rank == 2 && ta.dtype == CF_BF16 && ta.dims[0] == M && ta.dims[1] == N1);
        CHECK_EQ_INT(w2_nk, w->b_is_nk);
    }
    /* F without row reductions: one kernel, both pieces' files, each in its namespace, under the
     * B2B kernel; with them two kernels, one after the other */
    CHECK_EQ_INT(p0->n_stages[0] <= 1, cf_b2b_one_kernel(b));
    if (!cf_b2b_one_kernel(b)) {
        CHECK_EQ_INT(2, count_of(cf_kernel_source(k), "// ---- B2B kernel "));
        return;
    }
    CHECK_EQ_INT(2, count_of(cf_kernel_source(k), "// ---- phase "));
    CHECK_EQ_INT(1, count_of(cf_kernel_source(k), "namespace cf_p1 {"));
    CHECK_EQ_INT(1, count_of(cf_kernel_source(k), "namespace cf_p2 {"));
    CHECK_EQ_INT(1, count_of(cf_kernel_source(k), "#include \"cf_sm90_b2b.cuh\""));
    CHECK_EQ_INT(0, count_of(cf_kernel_source(k), "#include \"cf_sm90_kernel.cuh\""));
    /* planned alike: one tile and ring, every tile finished in its own epilogue */
    const cf_plan *q0 = cf_kernel_plan(cf_b2b_part(b, 0)), *q1 = cf_kernel_plan(cf_b2b_part(b, 1));
    CHECK(q0->bm == q1->bm && q0->bn == q1->bn && q0->stages == q1->stages);
    CHECK(!q0->late_finish && !q1->late_finish && q0->schedule == CF_SCHEDULE_PINGPONG &&
          q1->schedule == CF_SCHEDULE_PINGPONG);
}

/* The split of each B2B spec, without a shape: two valid IRs. */
static void test_split(void)
{
    static const struct {
        const char *path;
        bool nk;
    } specs[] = {
        {"examples/b2b_gelu.cf", false},      {"examples/b2b_ln.cf", false},
        {"examples/b2b_softmax.cf", false},   {"tests/specs/b2b_gelu_nk.cf", true},
        {"tests/specs/b2b_ln_nk.cf", true},   {"tests/specs/b2b_softmax_nk.cf", true},
        {"tests/specs/b2b_rowstat.cf", false},
    };
    for (int i = 0; i < CF_ARRAY_LEN(specs); i++) {
        cf_graph *g = parse(specs[i].path);
        cf_kernel *k = NULL;
        cf_error err;
        cf_status st = g ? cf_kernel_build_dims(g, NULL, NULL, specs[i].path, &k, &err) : CF_ERR_INVALID_ARG;
        CHECK_EQ_INT(CF_OK, st);
        if (st != CF_OK)
            fprintf(stderr, "%s: %s\n", specs[i].path, err.msg);
        if (k)
            check_parts(g, k, specs[i].nk);
        cf_kernel_free(k);
        cf_graph_free(g);
    }
}

/* b2b_rowstat: the second epilogue reads two per-row values of the first (Φ has no single B2B
 * IR for it); kernel 1 stores them f32 [M], kernel 2 reads them as [M] inputs. */
static void test_row_values(void)
{
    cf_graph *g = parse("tests/specs/b2b_rowstat.cf");
    cf_ir *ir = NULL;
    cf_error err;
    CHECK_EQ_INT(CF_ERR_UNSUPPORTED, cf_lower(g, &ir, &err));
    CHECK(cf_b2b_shaped(g));
    cf_kernel *k = NULL;
    CHECK_EQ_INT(CF_OK, cf_kernel_build_dims(g, NULL, NULL, "rowstat", &k, &err));
    const cf_b2b *b = cf_kernel_b2b(k);
    CHECK(b && !cf_kernel_ir(k));
    if (b) {
        const cf_ir *p0 = cf_kernel_ir(cf_b2b_part(b, 0)), *p1 = cf_kernel_ir(cf_b2b_part(b, 1));
        int rows_out = 0, rows_in = 0;
        for (int i = 0; i < cf_graph_num_outputs(p0->graph); i++) {
            cf_tensor_info t = cf_graph_output_info(p0->graph, i);
            rows_out += t.rank == 1 && t.dtype == CF_F32;
        }
        for (int i = 0; i < p1->n_args; i++)
            rows_in += p1->args[i].kind == CF_ARG_VEC_M && p1->args[i].dtype == CF_F32;
        CHECK_EQ_INT(3, rows_out);   /* R (an output of the graph), r and sum(h) for kernel 2 */
        CHECK_EQ_INT(2, rows_in);
        cf_strbuf sb = {0};
        cf_b2b_describe(b, &sb);
        CHECK_CONTAINS(sb.data, "B2B: two fused kernels, S [M,N1] bf16 through global memory (not one kernel: at "
                                "GEMM 'x', its row reductions tie a row group to N1's tiles");
        CHECK_CONTAINS(sb.data, "  kernel 1: GEMM 'x' [M,N1] and its epilogue -> R f32, S [M,N1] bf16, r f32 "
                                "[per row, for kernel 2], sum_12 f32 [per row, for kernel 2]\n");
        cf_sb_free(&sb);
    }
    cf_kernel_free(k);
    /* the public API takes it too */
    cf_options opt = cf_options_for(g, 1000, 1000, 520);
    CHECK_EQ_INT(CF_OK, cf_kernel_build(g, &opt, "rowstat", &k, &err));
    CHECK(cf_kernel_b2b(k) != NULL);
    cf_kernel_free(k);
    cf_graph_free(g);
}

/* What the split cannot run keeps Φ's reason and adds its own; graphs that are not B2B are
 * untouched (a dual GEMM stays one kernel). */
static void test_declined(void)
{
    const char *src = "input X: bf16[M, K]\ninput W1: bf16[K, N]\ninput W2: bf16[N, N]\n"
                      "x = X @ W1\noutput O: bf16 = relu(x) @ W2 + x\n";
    cf_graph *g = NULL;
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_spec_parse(src, strlen(src), "cross.cf", &g, &err));
    cf_kernel *k = NULL;
    CHECK_EQ_INT(CF_ERR_UNSUPPORTED, cf_kernel_build_dims(g, NULL, NULL, "cross", &k, &err));
    CHECK(k == NULL);
    CHECK_CONTAINS(err.msg, "cannot fuse");   /* Φ's */
    CHECK_CONTAINS(err.msg, "and not as two fused kernels either: ");
    CHECK_CONTAINS(err.msg, "the epilogue of GEMM 'matmul.5' reads the output of GEMM 'x' over its columns");
    cf_graph_free(g);
    g = parse("examples/swiglu.cf");
    CHECK(g && !cf_b2b_shaped(g));
    CHECK_EQ_INT(CF_OK, cf_kernel_build_dims(g, NULL, NULL, "swiglu", &k, &err));
    CHECK(k && !cf_kernel_b2b(k) && cf_kernel_ir(k)->dual);
    cf_kernel_free(k);
    cf_graph_free(g);
}

/* Both kernels compile (NVRTC) and are planned at their own GEMM's size: the workloads' B2B
 * shapes and one that is not a multiple of any tile. */
static void test_compile_shapes(void)
{
    static const int64_t shapes[][4] = {
        {8192, 1024, 2048, 1024}, {16384, 512, 1024, 512}, {8192, 1024, 4096, 1024}, {1000, 520, 1000, 264}};
    static const char *const specs[] = {"examples/b2b_gelu.cf", "examples/b2b_ln.cf", "examples/b2b_softmax.cf",
                                        "tests/specs/b2b_ln_nk.cf", "tests/specs/b2b_rowstat.cf"};
    for (int s = 0; s < CF_ARRAY_LEN(specs); s++)
        for (int i = 0; i < CF_ARRAY_LEN(shapes); i++) {
            if (s >= 3 && i != 3 && i != 0)   /* the extra specs: one workload shape and the odd one */
                continue;
            cf_graph *g = parse(specs[s]);
            int64_t dims[CF_MAX_DIMS];
            const int64_t *sh = shapes[i];
            b2b_dims(g, sh[0], sh[1], sh[2], sh[3], dims);
            cf_kernel *k = NULL;
            cf_error err;
            cf_status st = cf_kernel_build_dims(g, NULL, dims, specs[s], &k, &err);
            if (st == CF_OK)
                st = cf_kernel_prepare(k, dims, &err);
            CHECK_EQ_INT(CF_OK, st);
            if (st != CF_OK)
                fprintf(stderr, "%s at %lld,%lld,%lld,%lld: %s\n", specs[s], (long long)sh[0], (long long)sh[1],
                        (long long)sh[2], (long long)sh[3], err.msg);
            const cf_b2b *b = cf_kernel_b2b(k);
            CHECK(b != NULL);
            if (st == CF_OK && b) {
                const cf_plan *p0 = cf_kernel_plan(cf_b2b_part(b, 0)), *p1 = cf_kernel_plan(cf_b2b_part(b, 1));
                CHECK(p0->m == sh[0] && p0->n == sh[2] && p0->k == sh[1]);
                CHECK(p1->m == sh[0] && p1->n == sh[3] && p1->k == sh[2]);
                const bool one = cf_b2b_one_kernel(b);
                CHECK_EQ_INT(one, count_of(cf_kernel_ptx(k), ".entry cf_b2b_kernel"));
                CHECK_EQ_INT(one ? 0 : 2, count_of(cf_kernel_ptx(k), ".entry cf_gemm_kernel"));
                CHECK_EQ_INT(s == 0, one);   /* b2b_gelu's F has no row reduction */
                cf_resources r;
                CHECK_EQ_INT(CF_OK, cf_kernel_resources(k, &r, &err));
                CHECK(cf_b2b_predict_us(b, dims) > 0);
            }
            cf_kernel_free(k);
            cf_graph_free(g);
        }
}

/* A request the one kernel cannot take (a cooperative schedule) runs the pieces as two kernels,
 * and explain says why. */
static void test_two_kernels_when_asked(void)
{
    cf_graph *g = parse("examples/b2b_gelu.cf");
    int64_t dims[CF_MAX_DIMS];
    b2b_dims(g, 8192, 1024, 2048, 1024, dims);
    cf_plan_request req = {0};
    req.schedule = CF_SCHEDULE_COOPERATIVE;
    cf_kernel *k = NULL;
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_kernel_build_dims(g, &req, dims, "coop", &k, &err));
    const cf_b2b *b = cf_kernel_b2b(k);
    CHECK(b && !cf_b2b_one_kernel(b));
    if (b) {
        cf_strbuf sb = {0};
        cf_b2b_describe(b, &sb);
        CHECK_CONTAINS(sb.data, "B2B: two fused kernels, S [M,N1] bf16 through global memory (not one kernel: at "
                                "GEMM 'matmul.");
        CHECK_CONTAINS(sb.data, "its schedule is not pingpong)");
        CHECK_CONTAINS(sb.data, "  kernel 2: GEMM 'O'");
        cf_sb_free(&sb);
        CHECK_EQ_INT(2, count_of(cf_kernel_source(k), "// ---- B2B kernel "));
        CHECK(cf_kernel_plan(cf_b2b_part(b, 0))->schedule == CF_SCHEDULE_COOPERATIVE);
    }
    cf_kernel_free(k);
    cf_graph_free(g);
}

/* ---- on the stand-in driver ---------------------------------------------------------------- */

struct fake_cuda_counts {   /* tests/fake_cuda.c's */
    int encodes, allocs, frees, syncs, memsets_async, launches, copies_2d;
    size_t memset_async_bytes;
    unsigned char params[512];
};

static int input_named(const cf_graph *g, const char *name)
{
    for (int i = 0; i < cf_graph_num_inputs(g); i++)
        if (!strcmp(cf_graph_input_info(g, i).name, name))
            return i;
    CHECK(!"no such input");
    return 0;
}

static uint64_t desc_addr(const struct fake_cuda_counts *fc, int i)
{
    uint64_t p;
    memcpy(&p, fc->params + 128 * i, 8);
    return p;
}

/* One launch is one kernel launch, phase 1's parameters first: X, W1, then S (neither X nor any
 * tensor of the caller); S is the object's, allocated once per size. */
static void (*fake_capture)(int);

static void test_launch(struct fake_cuda_counts *fc)
{
    cf_graph *g = parse("examples/b2b_gelu.cf");
    int64_t dims[CF_MAX_DIMS];
    b2b_dims(g, 256, 64, 1000, 264, dims);
    cf_error err;
    cf_kernel *k = NULL;
    CHECK_EQ_INT(CF_OK, cf_kernel_build_dims(g, NULL, dims, "test_b2b", &k, &err));
    CHECK(k && cf_kernel_prepare(k, dims, &err) == CF_OK);
    const int n_in = cf_graph_num_inputs(g);
    uint64_t in[8] = {0}, out[1] = {0};
    bool ok = k && n_in <= 8;
    for (int i = 0; i < n_in && ok; i++) {
        cf_tensor_info t = cf_graph_input_info(g, i);
        size_t bytes;
        ok = cf_tensor_bytes(g, t, dims, cf_dtype_size(t.dtype), &bytes, &err) == CF_OK &&
             cf_rt_malloc(&in[i], bytes * 2, &err) == CF_OK;   /* room for M twice as large */
    }
    ok = ok && cf_rt_malloc(&out[0], (size_t)512 * 264 * 2, &err) == CF_OK;
    CHECK(ok);
    if (ok) {
        const cf_launch_args a = {dims, in, NULL, out, NULL};
        CHECK_EQ_INT(CF_OK, cf_kernel_launch(k, &a, &err));
        const uint64_t s = desc_addr(fc, 2);
        *fc = (struct fake_cuda_counts){0};
        CHECK_EQ_INT(CF_OK, cf_kernel_launch(k, &a, &err));
        CHECK_EQ_INT(1, fc->launches);
        CHECK_EQ_INT(0, fc->allocs);   /* S, the counters and the exchange slots are kept */
        CHECK(desc_addr(fc, 2) == s);
        for (int i = 0; i < n_in; i++)
            CHECK(s != in[i]);
        CHECK(s != out[0]);
        CHECK(desc_addr(fc, 0) == in[input_named(g, "X")]);
        CHECK(desc_addr(fc, 1) == in[input_named(g, "W1")]);
        dims[cf_graph_dim(g, "M")] = 512;   /* a larger M: a larger S */
        *fc = (struct fake_cuda_counts){0};
        CHECK_EQ_INT(CF_OK, cf_kernel_launch(k, &a, &err));
        CHECK_EQ_INT(1, fc->launches);
        /* a new S: the old one freed, a larger allocated (the fake's malloc may hand back the
         * same address, so the address says nothing) */
        CHECK(fc->allocs >= 1 && fc->frees >= 1);
        /* under CUDA-graph capture: the sizes launched before replay, a larger one is refused */
        fake_capture(1);
        *fc = (struct fake_cuda_counts){0};
        CHECK_EQ_INT(CF_OK, cf_kernel_launch(k, &a, &err));
        CHECK_EQ_INT(1, fc->launches);
        dims[cf_graph_dim(g, "M")] = 1024;
        *fc = (struct fake_cuda_counts){0};
        CHECK_EQ_INT(CF_ERR_INVALID_ARG, cf_kernel_launch(k, &a, &err));
        CHECK_CONTAINS(err.msg, "CUDA-graph capture of a B2B launch at M=1024: its S buffer is not allocated");
        CHECK_EQ_INT(0, fc->launches + fc->allocs);
        fake_capture(0);
    }
    for (int i = 0; i < n_in; i++)
        if (in[i])
            cf_rt_free(in[i], NULL);
    if (out[0])
        cf_rt_free(out[0], NULL);
    cf_kernel_free(k);
    cf_graph_free(g);
}

/* The hand-off the two launches share (unfused.c's bindings, as b2b.c launches them): kernel 1
 * writes S and the row values where kernel 2 reads them, and the graph's outputs go to the
 * caller's tensors.  b2b_rowstat has both kinds. */
static void test_handoff(void)
{
    cf_graph *g = parse("tests/specs/b2b_rowstat.cf");
    cf_unfused *u = NULL;
    cf_error err;
    CHECK_EQ_INT(CF_OK, cf_unfused_plan(g, &u, &err));
    if (!u) {
        cf_graph_free(g);
        return;
    }
    int64_t dims[CF_MAX_DIMS];
    b2b_dims(g, 40, 16, 24, 8, dims);
    const uint64_t in[3] = {0x1000, 0x2000, 0x3000}, out[2] = {0x4000, 0x5000};   /* never dereferenced */
    const cf_launch_args a = {dims, in, NULL, out, NULL};
    cf_launch_args pa;
    CHECK_EQ_INT(CF_OK, cf_unfused_piece_args(u, 0, &a, &pa, &err));
    const cf_graph *g0 = cf_unfused_piece_graph(u, 0), *g1 = cf_unfused_piece_graph(u, 1);
    uint64_t written[8] = {0}, s = 0;
    const char *roles[8] = {0};
    const int n0 = cf_graph_num_outputs(g0);
    CHECK(n0 == 4 && cf_graph_num_outputs(g1) == 1);
    for (int o = 0; o < n0 && o < 8; o++) {
        written[o] = pa.outputs[o];
        roles[o] = cf_unfused_piece_output_role(u, 0, o);
        if (!strcmp(roles[o], "operand"))
            s = written[o];
        else if (!strcmp(roles[o], "output"))
            CHECK(written[o] == out[1]);   /* R */
        else
            CHECK(written[o] != 0);
    }
    CHECK(pa.inputs[input_named(g0, "gemm_A")] == in[0] && pa.inputs[input_named(g0, "gemm_B")] == in[1]);
    CHECK_EQ_INT(CF_OK, cf_unfused_piece_args(u, 1, &a, &pa, &err));
    CHECK(s != 0 && pa.inputs[input_named(g1, "gemm_A")] == s);   /* kernel 2's GEMM reads S */
    CHECK(pa.inputs[input_named(g1, "gemm_B")] == in[2]);         /* against W2 */
    CHECK(pa.outputs[0] == out[0]);                                /* O */
    int rows_read = 0;
    for (int i = 0; i < cf_graph_num_inputs(g1); i++)
        for (int o = 0; o < n0 && o < 8; o++)
            rows_read += !strcmp(roles[o], "row value") && pa.inputs[i] == written[o];
    CHECK_EQ_INT(2, rows_read);           /* r and sum(h), from where kernel 1 wrote them */
    cf_unfused_free(u);
    cf_graph_free(g);
}

static void run_on_fake(void)
{
    cf_error err;
    if (cf_rt_init(&err) != CF_OK) {
        CHECK(!"fake driver");
        fprintf(stderr, "fake driver: %s\n", err.msg);
        return;
    }
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    struct fake_cuda_counts *(*counts)(void) =
        lib ? (struct fake_cuda_counts * (*)(void)) dlsym(lib, "fake_cuda_counts") : NULL;
    fake_capture = lib ? (void (*)(int))dlsym(lib, "fake_cuda_set_capturing") : NULL;
    CHECK(counts && fake_capture);
    if (counts && fake_capture)
        test_launch(counts());
    test_handoff();
}

int main(int argc, char **argv)
{
    (void)argc;
    /* on <this test's dir>/fake/libcuda.so.1 (the loader reads LD_LIBRARY_PATH once, at start) */
    if (!getenv("CF_TEST_B2B_FAKE")) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", argv[0]);
        char *slash = strrchr(dir, '/');
        snprintf(slash ? slash : dir, sizeof dir - (size_t)(slash ? slash - dir : 0), "%s", slash ? "/fake" : "fake");
        setenv("LD_LIBRARY_PATH", dir, 1);
        setenv("CF_TEST_B2B_FAKE", "1", 1);
        execv(argv[0], argv);
        perror("test_b2b: execv");
        return 1;
    }
    test_split();
    test_row_values();
    test_declined();
    test_compile_shapes();
    test_two_kernels_when_asked();
    run_on_fake();
    return tu_finish("test_b2b");
}
