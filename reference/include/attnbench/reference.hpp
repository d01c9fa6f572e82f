// The float64 reference: the single source of truth for O, LSE, dQ, dK and dV.
// Eigen, double precision, no dependency on the harness or any implementation (it only uses the
// Problem type for sizes and conventions). Layouts are those of problem.hpp, as doubles; for a
// varlen problem the packed THD layout, with b the sequence and row and key counts its own
// (seqlens_q[b], seqlens_kv[b]) in forward_rows and backward_kv_head. A paged problem's k and v
// are its pool of pages ([num_pages, page_size, heads_kv, d]), read through the block table
// (Problem::kv_row); paged problems have a forward only (backward and backward_kv_head throw).
#pragma once

#include <vector>

#include "attnbench/problem.hpp"

namespace attnbench::reference {

// Full forward. o: [b, seq_q, heads_q, d], lse: [b, heads_q, seq_q]. A row that sees no key
// gets o = 0 and lse = -inf. Multithreaded over (batch, head).
void forward(const Problem& p, const double* q, const double* k, const double* v, double* o,
             double* lse);

// Forward for selected query rows of one (batch b, query head h). o_rows: [rows.size(), d],
// lse_rows: [rows.size()]. Used by sampled verification.
void forward_rows(const Problem& p, const double* q, const double* k, const double* v, int b,
                  int h, const std::vector<int>& rows, double* o_rows, double* lse_rows);

// Full backward: exact gradients of sum(O * dout). dq like q, dk/dv like k (summed over the
// query heads of each GQA group). Multithreaded.
void backward(const Problem& p, const double* q, const double* k, const double* v,
              const double* dout, double* dq, double* dk, double* dv);

// Backward restricted to one (batch b, kv head hk): dk_head, dv_head: [seq_kv, d] for that kv
// head; dq_group: [group, seq_q, d] for the query heads hk*group .. hk*group+group-1.
void backward_kv_head(const Problem& p, const double* q, const double* k, const double* v,
                      const double* dout, int b, int hk, double* dq_group, double* dk_head,
                      double* dv_head);

}  // namespace attnbench::reference
