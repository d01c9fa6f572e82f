// The problem flags of `attnbench run` and `expand` (--batch, --heads-q, --seq, --head-dim,
// --causal, --dtype, ...) as a config document, so that a sweep needs no config file:
//
//   attnbench run --seq 512,1k,2k --head-dim 64,128 --causal both --dtype bf16,f16
//
// is the config {"problem": {...}, "sweep": {"product": {"dtype": ["bf16", "f16"], "causal":
// [false, true], "head_dim": [64, 128], "seq": [512, 1024, 2048]}}}: 2 x 2 x 2 x 3 = 24 cases. A
// flag with one value goes into "problem"; with several (comma-separated) it is a product axis.
// Sizes take a k suffix (1k = 1024, as FlashAttention's benchmark scripts write them). --causal
// alone means true; it also takes true, false or both. The axes vary in the order dtype, causal,
// head_dim, heads, batch, scale, then the sequence lengths fastest, so that the table's columns
// (seq) are neighbours.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <variant>
#include <vector>

namespace attnbench {

struct ProblemFlagValue {
  std::string flag;  // "--seq"
  std::string key;   // "seq": the config's problem field
  enum Kind { integer, real, text, boolean } kind;
  std::string value;  // as given ("512,1k,2k"; "" for a bare --causal)
};

// The document's "problem" and "sweep" objects ({"problem": ..., "sweep": ...}; "sweep" only
// when a flag has several values), or the message for a bad value ("--seq = 5x: not an
// integer"). flag_of_path: the JSON pointer of each value written -> its flag, for the config's
// own error messages (/problem/seq, /sweep/product/seq).
std::variant<nlohmann::ordered_json, std::string> problem_from_flags(
    const std::vector<ProblemFlagValue>& given, std::map<std::string, std::string>& flag_of_path);

}  // namespace attnbench
