// The problem flags as a config document (cli_problem.hpp).
#include "attnbench/cli_problem.hpp"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace attnbench {

using ojson = nlohmann::ordered_json;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) out.push_back(part);
  if (!s.empty() && s.back() == ',') out.push_back("");
  return out;
}

// "512", "1k" (1024), "16K"; false for anything else. too_large: a number beyond long long.
bool parse_size(const std::string& t, long long& v, bool& too_large) {
  too_large = false;
  if (t.empty()) return false;
  std::string digits = t;
  long long mult = 1;
  if (digits.back() == 'k' || digits.back() == 'K') {
    mult = 1024;
    digits.pop_back();
  }
  if (digits.empty() || digits.find_first_not_of("-0123456789") != std::string::npos) return false;
  std::size_t used = 0;
  try {
    v = std::stoll(digits, &used);
  } catch (const std::out_of_range&) {
    too_large = true;
    return false;
  } catch (const std::exception&) {
    return false;
  }
  if (used != digits.size()) return false;
  if (mult > 1 && (v > (1ll << 40) || v < -(1ll << 40))) {
    too_large = true;
    return false;
  }
  v *= mult;
  return true;
}

bool parse_bool(const std::string& t, std::vector<bool>& out) {
  if (t.empty() || t == "true" || t == "yes" || t == "on" || t == "1")
    out.push_back(true);
  else if (t == "false" || t == "no" || t == "off" || t == "0")
    out.push_back(false);
  else if (t == "both")
    out.insert(out.end(), {false, true});
  else
    return false;
  return true;
}

// The order of the product axes, slowest first.
const char* const kAxisOrder[] = {"dtype",   "causal",      "head_dim",     "heads_q",
                                  "heads_kv", "batch",      "scale",        "softcap",
                                  "window_left", "window_right", "page_size", "page_order",
                                  "seq_q", "seq_kv", "seq"};

}  // namespace

std::variant<ojson, std::string> problem_from_flags(
    const std::vector<ProblemFlagValue>& given, std::map<std::string, std::string>& flag_of_path) {
  ojson problem = ojson::object();
  std::map<std::string, std::pair<std::string, ojson>> axes;  // key -> flag, values
  for (const ProblemFlagValue& f : given) {
    ojson values = ojson::array();
    const std::vector<std::string> parts = f.kind == ProblemFlagValue::boolean && f.value.empty()
                                               ? std::vector<std::string>{""}
                                               : split(f.value);
    for (const std::string& t : parts) {
      switch (f.kind) {
        case ProblemFlagValue::integer: {
          long long v = 0;
          bool too_large = false;
          if (!parse_size(t, v, too_large)) {
            if (too_large) return f.flag + " = " + f.value + ": is too large: at most 2147483647";
            return f.flag + " = " + f.value +
                   ": not an integer (or a list of them, e.g. 512,1k,2k)";
          }
          values.push_back(v);
          break;
        }
        case ProblemFlagValue::real: {
          char* end = nullptr;
          const double v = std::strtod(t.c_str(), &end);
          if (t.empty() || *end != '\0')
            return f.flag + " = " + f.value + ": not a number (or a list of them)";
          // Said here, as typed: JSON would carry NaN as null and inf as an overflow.
          if (!std::isfinite(v)) return f.flag + " = " + f.value + ": not a finite number";
          values.push_back(v);
          break;
        }
        case ProblemFlagValue::boolean: {
          std::vector<bool> b;
          if (!parse_bool(t, b)) {
            return f.flag + " = " + f.value +
                   ": must be true, false or both (a config file goes before the flags)";
          }
          for (const bool x : b) values.push_back(x);
          break;
        }
        case ProblemFlagValue::text:
          if (t.empty()) return f.flag + " = " + f.value + ": an empty value";
          values.push_back(t);
          break;
      }
    }
    if (values.size() == 1) {
      problem[f.key] = values[0];
      flag_of_path["/problem/" + f.key] = f.flag;
    } else {
      axes[f.key] = {f.flag, values};
    }
  }
  ojson doc;
  doc["problem"] = problem;
  if (!axes.empty()) {
    ojson product = ojson::object();
    for (const char* key : kAxisOrder) {
      const auto it = axes.find(key);
      if (it == axes.end()) continue;
      product[key] = it->second.second;
      flag_of_path[std::string("/sweep/product/") + key] = it->second.first;
      for (std::size_t i = 0; i < it->second.second.size(); ++i)
        flag_of_path[std::string("/sweep/product/") + key + "/" + std::to_string(i)] =
            it->second.first;
    }
    doc["sweep"] = {{"product", product}};
  }
  return doc;
}

}  // namespace attnbench
