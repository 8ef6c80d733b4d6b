/* lex.c — the .cf tokenizer and the chibicc-style "line + caret" diagnostics.
 *
 * Tokens are produced on demand.  Newlines end statements except inside ( )
 * or [ ], so long expressions may wrap; ';' also ends a statement.  Every
 * byte the language does not know is an error, which keeps NULs and non-UTF-8
 * input out of the parser. */
#include "cf_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cf_lex_init(cf_lexer *lx, const char *src, size_t len, const char *file)
{
    memset(lx, 0, sizeof *lx);
    lx->src = src;
    lx->len = len;
    lx->file = file ? file : "<spec>";
    lx->line = 1;
}

const char *cf_tok_kind_name(cf_tok_kind k)
{
    static const char *const names[] = {
        "end of input", "end of statement", "name", "number", "'+'", "'-'", "'*'", "'/'",
        "'@'", "'**'", "'('", "')'", "'['", "']'", "','", "':'", "'='",
    };
    _Static_assert(CF_ARRAY_LEN(names) == CF_TOK_KIND_COUNT, "token names out of sync");
    return (unsigned)k < CF_TOK_KIND_COUNT ? names[k] : "?";
}

/* ---- diagnostics ------------------------------------------------------------ */

enum { CTX_BEFORE = 60, CTX_WIDTH = 120 };

/* Offset of the first byte of line `line` (1-based), or len if past the end. */
static size_t line_offset(const cf_lexer *lx, int line)
{
    size_t off = 0;
    for (int l = 1; l < line && off < lx->len; off++)
        if (lx->src[off] == '\n')
            l++;
    return off;
}

/* Writes the line and a caret under col into buf.  Unprintable bytes show as
 * '?' one for one, so the caret stays aligned; long lines are windowed. */
static void format_context(const cf_lexer *lx, int line, int col, char *buf, size_t n)
{
    if (n == 0)
        return;
    buf[0] = '\0';
    if (line < 1 || col < 1)
        return;
    size_t ls = line_offset(lx, line), le = ls;
    while (le < lx->len && lx->src[le] != '\n')
        le++;
    size_t caret = ls + (size_t)(col - 1); /* may be le (end of line) */
    if (caret > le)
        caret = le;
    size_t start = ls;
    bool pre = false, post = false;
    if (caret - ls > CTX_BEFORE + 20) {
        start = caret - CTX_BEFORE;
        pre = true;
    }
    size_t end = le;
    if (end - start > CTX_WIDTH) {
        end = start + CTX_WIDTH;
        post = true;
    }
    char text[CTX_WIDTH + 8], mark[CTX_WIDTH + 8];
    size_t t = 0, m = 0;
    if (pre) {
        memcpy(text, "...", 3);
        memcpy(mark, "   ", 3);
        t = m = 3;
    }
    for (size_t i = start; i < end; i++) {
        unsigned char c = (unsigned char)lx->src[i];
        text[t++] = c == '\t' ? '\t' : (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
        if (i < caret)
            mark[m++] = c == '\t' ? '\t' : ' ';
    }
    if (post) {
        memcpy(text + t, "...", 3);
        t += 3;
    }
    text[t] = '\0';
    mark[m++] = '^';
    mark[m] = '\0';
    snprintf(buf, n, "%s\n%s", text, mark);
}

void cf_lex_append_context(const cf_lexer *lx, int line, int col, cf_error *err)
{
    if (!err)
        return;
    char ctx[2 * CTX_WIDTH + 32];
    format_context(lx, line, col, ctx, sizeof ctx);
    size_t used = strlen(err->msg);
    if (ctx[0] && used + 1 < sizeof err->msg)
        snprintf(err->msg + used, sizeof err->msg - used, "\n%s", ctx);
}

cf_status cf_lex_errorf(const cf_lexer *lx, cf_status st, int line, int col, cf_error *err,
                        const char *fmt, ...)
{
    if (!err)
        return st;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cf_errorf(err, st, (cf_loc){lx->file, line, col}, "%s", msg);
    cf_lex_append_context(lx, line, col, err);
    return st;
}

/* ---- scanning ----------------------------------------------------------------- */

static bool is_ident_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_ident_char(int c) { return is_ident_start(c) || is_digit(c); }

static int peekc(const cf_lexer *lx, size_t ahead)
{
    return lx->pos + ahead < lx->len ? (unsigned char)lx->src[lx->pos + ahead] : -1;
}

static int col_of(const cf_lexer *lx, size_t off) { return (int)(off - lx->line_start) + 1; }

/* Copies up to 32 bytes of src[off, off+len) printably, for messages. */
static const char *excerpt(const cf_lexer *lx, size_t off, size_t len, char *buf, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < len && k + 4 < n && i < 32; i++) {
        unsigned char c = (unsigned char)lx->src[off + i];
        buf[k++] = (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
    }
    if (len > 32 && k + 4 < n) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
    return buf;
}

/* number = digits [ "." digits* ] [ exp ] | "." digits [ exp ] ;
 * exp = ("e" | "E") [ "+" | "-" ] digits.  Hex, inf and nan are not numbers. */
static cf_status lex_number(cf_lexer *lx, cf_token *tok, cf_error *err)
{
    size_t p = lx->pos;
    const char *s = lx->src;
    size_t n = lx->len;
    bool digits = false;
    while (p < n && is_digit(s[p]))
        p++, digits = true;
    if (p < n && s[p] == '.') {
        p++;
        while (p < n && is_digit(s[p]))
            p++, digits = true;
    }
    bool bad_exp = false;
    if (digits && p < n && (s[p] == 'e' || s[p] == 'E')) {
        size_t q = p + 1;
        if (q < n && (s[q] == '+' || s[q] == '-'))
            q++;
        if (q < n && is_digit(s[q])) {
            while (q < n && is_digit(s[q]))
                q++;
        } else {
            bad_exp = true;
        }
        p = q;
    }
    size_t len = p - lx->pos;
    char ex[48];
    /* A number glued to letters, digits or another dot ("2x", "1.2.3") is a
     * typo, not two tokens. */
    if (bad_exp || (p < n && (is_ident_char(s[p]) || s[p] == '.'))) {
        size_t e = p;
        while (e < n && (is_ident_char(s[e]) || s[e] == '.'))
            e++;
        return cf_lex_errorf(lx, CF_ERR_PARSE, lx->line, col_of(lx, lx->pos), err,
                             bad_exp ? "invalid number '%s': the exponent has no digits"
                                     : "invalid number '%s'",
                             excerpt(lx, lx->pos, e - lx->pos, ex, sizeof ex));
    }
    if (len > 256)
        return cf_lex_errorf(lx, CF_ERR_PARSE, lx->line, col_of(lx, lx->pos), err,
                             "number '%s' is too long (at most 256 characters)",
                             excerpt(lx, lx->pos, len, ex, sizeof ex));
    char buf[260];
    memcpy(buf, s + lx->pos, len);
    buf[len] = '\0';
    double v = strtod(buf, NULL);
    if (!isfinite(v))
        return cf_lex_errorf(lx, CF_ERR_PARSE, lx->line, col_of(lx, lx->pos), err,
                             "number '%s' is out of range", excerpt(lx, lx->pos, len, ex, sizeof ex));
    tok->kind = CF_TOK_NUMBER;
    tok->len = len;
    tok->num = v;
    lx->pos = p;
    return CF_OK;
}

cf_status cf_lex_next(cf_lexer *lx, cf_token *tok, cf_error *err)
{
    const char *s = lx->src;
    for (;;) {
        memset(tok, 0, sizeof *tok);
        tok->off = lx->pos;
        tok->line = lx->line;
        tok->col = col_of(lx, lx->pos);
        if (lx->pos >= lx->len) {
            tok->kind = CF_TOK_EOF;
            return CF_OK;
        }
        int c = (unsigned char)s[lx->pos];
        if (c == ' ' || c == '\t' || c == '\r') {
            lx->pos++;
            continue;
        }
        if (c == '#') { /* comment to end of line; the newline still counts */
            while (lx->pos < lx->len && s[lx->pos] != '\n')
                lx->pos++;
            continue;
        }
        if (c == '\n') {
            lx->pos++;
            lx->line++;
            lx->line_start = lx->pos;
            if (lx->nest > 0)
                continue;
            tok->kind = CF_TOK_END;
            tok->len = 1;
            return CF_OK;
        }
        if (is_digit(c) || (c == '.' && is_digit(peekc(lx, 1))))
            return lex_number(lx, tok, err);
        if (is_ident_start(c)) {
            size_t p = lx->pos;
            while (p < lx->len && is_ident_char(s[p]))
                p++;
            if (p - lx->pos >= CF_MAX_NAME) {
                char ex[48];
                return cf_lex_errorf(lx, CF_ERR_PARSE, tok->line, tok->col, err,
                                     "name '%s' is too long (%zu characters; at most %d)",
                                     excerpt(lx, lx->pos, p - lx->pos, ex, sizeof ex), p - lx->pos,
                                     CF_MAX_NAME - 1);
            }
            tok->kind = CF_TOK_IDENT;
            tok->len = p - lx->pos;
            lx->pos = p;
            return CF_OK;
        }
        tok->len = 1;
        switch (c) {
        case '+': tok->kind = CF_TOK_PLUS; break;
        case '-': tok->kind = CF_TOK_MINUS; break;
        case '/': tok->kind = CF_TOK_SLASH; break;
        case '@': tok->kind = CF_TOK_AT; break;
        case ',': tok->kind = CF_TOK_COMMA; break;
        case ':': tok->kind = CF_TOK_COLON; break;
        case '=': tok->kind = CF_TOK_EQUAL; break;
        case '*':
            if (peekc(lx, 1) == '*') {
                tok->kind = CF_TOK_POW;
                tok->len = 2;
            } else {
                tok->kind = CF_TOK_STAR;
            }
            break;
        case ';':
            /* inside brackets ';' cannot end the statement: let the parser say so */
            tok->kind = CF_TOK_END;
            break;
        case '(': tok->kind = CF_TOK_LPAREN; lx->nest++; break;
        case '[': tok->kind = CF_TOK_LBRACKET; lx->nest++; break;
        case ')':
        case ']':
            tok->kind = c == ')' ? CF_TOK_RPAREN : CF_TOK_RBRACKET;
            if (lx->nest > 0)
                lx->nest--;
            break;
        default:
            if (c >= 0x21 && c < 0x7f)
                return cf_lex_errorf(lx, CF_ERR_PARSE, tok->line, tok->col, err,
                                     "unexpected character '%c'", c);
            return cf_lex_errorf(lx, CF_ERR_PARSE, tok->line, tok->col, err,
                                 "unexpected byte 0x%02X%s", (unsigned)c,
                                 c >= 0x80 ? " (only ASCII is allowed outside comments)" : "");
        }
        lx->pos += tok->len;
        return CF_OK;
    }
}
