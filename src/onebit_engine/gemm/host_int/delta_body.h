/* The delta rule on one value head, in blocks of W columns (W = the vector's float lanes), for delta.c.
 * Included once per vector width with VEC, W, NB_MAX, LD, ST, MUL, ADD, SUB, SET1, ZERO, ROW0 and BLOCK (the
 * functions' names) defined. Every element sees the float32 operations of ops/gated_delta_fast._head_rows in the same
 * order, each rounded on its own (separate multiply and add, no FMA); each sum over i runs in ascending i
 * per column, as there. Columns of S, mem and the read-out depend on no other column, so a few blocks of W
 * columns run all rows before the next ones, their mem, read-out and next-read sums in registers (the numba
 * loop keeps them in memory: three stores per element; here one). */

/* Row 0's decay (from the start state) and read over the first jv columns (whole vectors), i outermost: the
 * start state arrives from memory (a verify's snapshot, or a state the weights streamed since pushed out of
 * the cache), and a block's column strip, 64 bytes every dv floats, defeated the hardware prefetcher (in a
 * model, the blocked loop alone was slower than numba's). Here it streams; each column's read still sums over
 * i in ascending order. mem [jv] gets the reads. */
static inline __attribute__((always_inline)) TARGET void ROW0(const delta_head_t *J, int64_t jv, float *mem) {
    const int64_t dk = J->dk, dv = J->dv;
    const VEC a = SET1(J->alphas[0]);
    for (int64_t j = 0; j < jv; j += W) ST(mem + j, ZERO());
    for (int64_t i = 0; i < dk; i++) {
        const VEC ki = SET1(J->ks[i]);
        for (int64_t j = 0; j < jv; j += W) {
            VEC s = MUL(LD(J->S0 + i * dv + j), a); /* 1. decay */
            ST(J->S + i * dv + j, s);
            ST(mem + j, ADD(LD(mem + j), MUL(ki, s))); /* 2. read */
        }
    }
}

/* Rows 0..n-1 on nb blocks of W columns from j0 (nb <= NB_MAX, a constant at each call), from row 0's reads mem0
 * [nb * W] (ROW0 has decayed them already). Several blocks at once: a block's read-out and next-read sums are each
 * one add a step over i, and alone each waited out the add's latency (~3 cycles) every step; nb independent chains
 * fill it, and one broadcast of k[i], q[i] serves them all. Each column's operations and their order are those of
 * one block. */
static inline __attribute__((always_inline)) TARGET void BLOCK(const delta_head_t *J, int64_t j0, const float *mem0,
                                                                const int nb, pf_t *pf) {
    const int64_t n = J->n, dk = J->dk, dv = J->dv;
    float *S = J->S + j0;
    VEC mem[NB_MAX], ot[NB_MAX], nxt[NB_MAX];
#pragma GCC unroll 8
    for (int b = 0; b < nb; b++) mem[b] = LD(mem0 + b * W);
    for (int64_t t = 0; t < n; t++) {
        const float *kt = J->ks + t * J->k_row, *qt = J->qs + t * J->k_row;
        const VEC beta = SET1(J->betas[t * J->hv]);
#pragma GCC unroll 8
        for (int b = 0; b < nb; b++) {
            mem[b] = MUL(SUB(LD(J->vs + t * J->v_row + j0 + b * W), mem[b]), beta); /* 3. delta of row t */
            ot[b] = ZERO();
        }
        if (t + 1 == n) { /* the last row: 4. write, 5. read-out */
            for (int64_t i = 0; i < dk; i++) {
                const VEC ki = SET1(kt[i]), qi = SET1(qt[i]);
                pf_step(pf);
#pragma GCC unroll 8
                for (int b = 0; b < nb; b++) {
                    VEC s = ADD(LD(S + i * dv + b * W), MUL(ki, mem[b]));
                    ST(S + i * dv + b * W, s);
                    if (J->read_out) ot[b] = ADD(ot[b], MUL(qi, s));
                }
            }
        } else {
            const float *k2 = J->ks + (t + 1) * J->k_row;
            const VEC a2 = SET1(J->alphas[(t + 1) * J->hv]);
#pragma GCC unroll 8
            for (int b = 0; b < nb; b++) nxt[b] = ZERO();
            for (int64_t i = 0; i < dk; i++) {
                const VEC ki = SET1(kt[i]), qi = SET1(qt[i]), k2i = SET1(k2[i]);
                pf_step(pf);
#pragma GCC unroll 8
                for (int b = 0; b < nb; b++) {
                    VEC s = ADD(LD(S + i * dv + b * W), MUL(ki, mem[b])); /* 4. write (row t) */
                    if (J->read_out) ot[b] = ADD(ot[b], MUL(qi, s));     /* 5. read-out (row t) */
                    VEC s2 = MUL(s, a2);                                 /* 1. decay (row t + 1) */
                    ST(S + i * dv + b * W, s2);
                    nxt[b] = ADD(nxt[b], MUL(k2i, s2)); /* 2. read (row t + 1) */
                }
            }
#pragma GCC unroll 8
            for (int b = 0; b < nb; b++) mem[b] = nxt[b];
        }
        if (J->read_out) {
#pragma GCC unroll 8
            for (int b = 0; b < nb; b++) ST(J->o + t * J->o_row + j0 + b * W, ot[b]);
        }
    }
}
