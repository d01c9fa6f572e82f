// `run --dump DIR` (docs/cli.md): the tensors of each verified row as .npy files, for a look in
// numpy. Under DIR/<case label>/: the case's inputs (Q, K, V, dO) and its full-mode reference
// outputs rounded to float32 (ref_O, ref_LSE, ref_dQ, ref_dK, ref_dV), then one file per output
// of each row: <impl>[+<option>=<value>...].<pass>.<O|LSE|dQ|dK|dV>.npy.
#pragma once

#include <string>

#include "attnbench/implementation.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify.hpp"

namespace attnbench {

// Makes DIR (and its parents) and checks that files can be created in it; throws
// std::runtime_error saying why not. Called before anything runs: a --dump that cannot be
// written is bad input, not a warning at the first row.
void prepare_dump_dir(const std::string& dir);

// with_inputs: also the case's inputs and reference (the first row of the case dumped).
// Throws std::runtime_error when a file cannot be written.
void dump_row(const std::string& dir, const Problem& p, const CaseInputs& in, const Reference& ref,
              bool with_inputs, const std::string& impl, const Options& options, Pass pass,
              const Outputs& outs);

}  // namespace attnbench
