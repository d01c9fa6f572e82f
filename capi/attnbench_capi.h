/* libattnbench_capi: attnbench's harness for programs outside it, over a C ABI (loaded by the
 * Python peers in scripts/peers/ with ctypes; docs/peers.md).
 *
 * Two things, both owned by the harness so that nothing is computed a second way:
 *  - a case (ab_case_*): the harness's seeded inputs of a problem, and the project's verification
 *    rule applied to outputs a peer computed from them (float64 reference, full or sampled as
 *    `attnbench run` resolves it; the same device's naive 3-pass as the baseline; verify.cpp);
 *  - a call (ab_call_*): any registered implementation's forward or backward on raw pointers
 *    (device pointers for CUDA implementations, on the stream given), so a peer's timer can time
 *    attnbench's own kernels, the same kernels `attnbench run` times with its own timer.
 *
 * Errors: functions returning a pointer return NULL, functions returning int return -1; the
 * message is then ab_last_error() (per thread, valid until the next call). Strings returned are
 * owned by the library (by the handle, for ab_case_verify and ab_call_supports) and stay valid
 * until the next call on the same handle.
 *
 * Tensors: BSHD, contiguous; q, o, dout, dq [b, sq, hq, d]; k, v, dk, dv [b, skv, hkv, d] in the
 * problem's dtype (f16/bf16 as 16-bit patterns); lse [b, hq, sq] float32. Varlen (seqlens_q,
 * seqlens_kv): packed THD, q [total_q, hq, d], k [total_kv, hkv, d], lse [hq, total_q]. Paged
 * (page_size > 0, forward only): k and v are the pool [num_pages, page_size, hkv, d], read through
 * the int32 block table [b, pages_per_seq] (core/include/attnbench/problem.hpp); q, o, lse as above.
 */
#ifndef ATTNBENCH_CAPI_H
#define ATTNBENCH_CAPI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AB_CAPI_VERSION 4  /* 2: problems carry window_left, window_right, softcap; unknown keys refused.
                              3: ab_call_set_cu_seqlens for varlen problems.
                              4: paged KV caches (problems carry page_size, num_pages, page_order or
                                 block_table): ab_case_metadata, ab_call_metadata, ab_call_set_paged.
                              4 only adds functions to 3 and changes none: a version-3 caller works
                              unchanged with this library if it accepts a version >= 3. */

int ab_capi_version(void);
const char* ab_last_error(void);
/* JSON: {"capi_version", "git_revision", "git_dirty", "build_type", "compiler", "cuda": bool,
 * "implementations": [{"name", "device", "forward", "backward", "fwd_partner", "options"}]}. */
const char* ab_build_info(void);

/* ---- cases: inputs and verification ---- */
typedef struct ab_case ab_case;
/* spec: a JSON object {"problem": {...}, "inputs": {"seed", "distribution"}, "verify": {"mode",
 * "sample_heads", "sample_rows"}, "device": "cuda" | "cpu", "passes": [...]}; an `attnbench
 * expand` line is one (device defaults to cuda). Builds the inputs (the reference and the
 * baseline are computed on the first ab_case_verify). */
ab_case* ab_case_open(const char* spec_json);
void ab_case_close(ab_case* c);
/* Copies the inputs into host buffers of the problem's sizes (any may be NULL). */
int ab_case_inputs(ab_case* c, void* q, void* k, void* v, void* dout);
/* Verifies a peer's outputs of pass ("fwd", "bwd", "fwd_bwd"), host pointers. An output the peer
 * does not produce is NULL and named in `absent` (comma-separated, e.g. "LSE"): left out of the
 * verdict and said in its note. Returns the verdict as JSON: the "verify" block of a results row
 * plus "ok", "reason" and "note". */
const char* ab_case_verify(ab_case* c, const char* pass, const void* o, const float* lse, const void* dq,
                           const void* dk, const void* dv, const char* absent);
/* Version 4. The int32 arrays a varlen or paged forward reads, exactly as the harness makes them for
 * its own rows (sequence_metadata(): the block table is the one Problem::make_block_table builds
 * from page_order, shuffled with its fixed seed, or the explicit rows), one array after the other in
 * one buffer. Returns the buffer's length in int32 elements (0 for a dense, contiguous problem), or
 * -1; copies the buffer into out (host memory of at least that many int32) when out is not NULL,
 * and the offsets of its four arrays into offsets[0..3] when offsets is not NULL, -1 for an array
 * the problem has none of:
 *   [0] cu_seqlens_q   varlen: [batch + 1] prefix sums of seqlens_q (FlashAttention's cu_seqlens_q)
 *   [1] cu_seqlens_kv  varlen and not paged: [batch + 1] prefix sums of seqlens_kv
 *   [2] seqlens_kv     varlen or paged: [batch] context lengths (FlashAttention's seqused_k)
 *   [3] block_table    paged: [batch, pages_per_seq] row-major physical page indices; entries past a
 *                      sequence's ceil(seqlens_kv[b] / page_size) pages are padding, never read (0 in
 *                      generated tables, -1 in an explicit table's short rows)
 * A paged case's k and v (ab_case_inputs) are the pool these pages index. */
int64_t ab_case_metadata(ab_case* c, int32_t* out, int64_t* offsets);

/* ---- calls: one implementation, one problem, one pass ---- */
typedef struct ab_call ab_call;
/* problem_json: as a results row's "problem"; options_json: {"block_c": 64} or NULL. */
ab_call* ab_call_open(const char* impl, const char* problem_json, const char* pass, const char* options_json);
void ab_call_close(ab_call* c);
/* "" when the implementation can run the call, else why not (a SKIP row's reason). */
const char* ab_call_supports(ab_call* c);
/* Workspace bytes to allocate on the implementation's device and pass to forward/backward. Zero-fill
 * it once after allocating it and reuse it unchanged: an implementation may keep counters there that
 * each call leaves at zero for the next (cuda.flash_decode's fused combine). */
int64_t ab_call_workspace_bytes(ab_call* c);
/* Once before the first call, outside any timed region or graph capture (plans, attributes). */
int ab_call_prepare(ab_call* c);
/* A varlen problem (seqlens_q / seqlens_kv in problem_json): the lengths' prefix sums, batch + 1
 * int32 each, in the implementation's device memory (FlashAttention's cu_seqlens), passed to every
 * later forward/backward. A CUDA implementation refuses a varlen call without them. */
int ab_call_set_cu_seqlens(ab_call* c, const int32_t* cu_seqlens_q, const int32_t* cu_seqlens_kv);
/* Version 4. The call's problem's metadata, as ab_case_metadata (the same arrays for the same
 * problem JSON). */
int64_t ab_call_metadata(ab_call* c, int32_t* out, int64_t* offsets);
/* Version 4. A paged problem (page_size > 0): its block table ([batch, pages_per_seq]) and context
 * lengths ([batch]), int32 in the implementation's device memory (ab_call_metadata's arrays [3]
 * and [2], uploaded by the caller), passed to every later forward. A varlen paged problem also
 * takes ab_call_set_cu_seqlens(c, cu_seqlens_q, NULL) (its K and V are not packed: no
 * cu_seqlens_kv). A CUDA implementation refuses a paged forward without them; CPU ones read the
 * table from the problem. Refused (-1) for a problem that is not paged or a NULL pointer. */
int ab_call_set_paged(ab_call* c, const int32_t* block_table, const int32_t* seqlens_kv);
/* Enqueue on stream (a cudaStream_t; NULL on the CPU). No allocation, no synchronisation: safe to
 * capture in a CUDA graph for implementations that follow the harness's contract. */
int ab_call_forward(ab_call* c, const void* q, const void* k, const void* v, void* o, float* lse, void* workspace,
                    size_t workspace_bytes, void* stream);
int ab_call_backward(ab_call* c, const void* q, const void* k, const void* v, const void* o, const float* lse,
                     const void* dout, void* dq, void* dk, void* dv, void* workspace, size_t workspace_bytes,
                     void* stream);

#ifdef __cplusplus
}
#endif

#endif
