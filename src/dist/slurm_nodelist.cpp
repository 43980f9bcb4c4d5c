// Slurm's compressed host lists and per-node task counts (see launch_env.h).
#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/launch_env.h"

namespace furlong::dist {
namespace {

// Splits at commas outside brackets.
std::vector<std::string> split_top_level(const std::string& list) {
  std::vector<std::string> parts;
  std::string current;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    FURLONG_CHECK(depth == 0 || depth == 1, "Slurm node list '", list,
                  "' has unbalanced or nested brackets");
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  FURLONG_CHECK(depth == 0, "Slurm node list '", list, "' has an unclosed '['");
  parts.push_back(current);
  for (const auto& p : parts) {
    FURLONG_CHECK(!p.empty(), "Slurm node list '", list, "' has an empty host name");
  }
  return parts;
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// "01-04,07" -> 01 02 03 04 07 (the width of a range's first bound pads every member).
std::vector<std::string> expand_range_set(const std::string& set, const std::string& list,
                                          size_t max_hosts) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= set.size()) {
    size_t comma = set.find(',', start);
    std::string item =
        set.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t dash = item.find('-');
    std::string lo = item.substr(0, dash);
    std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    FURLONG_CHECK(all_digits(lo) && all_digits(hi) && lo.size() <= 9 && hi.size() <= 9,
                  "Slurm node list '", list, "': '", item,
                  "' in brackets is not a number or a range like 01-04");
    long a = std::stol(lo), b = std::stol(hi);
    FURLONG_CHECK(a <= b, "Slurm node list '", list, "': range ", item, " runs backwards");
    for (long v = a; v <= b; ++v) {
      FURLONG_CHECK(out.size() < max_hosts, "Slurm node list '", list, "' names more than ",
                    max_hosts, " hosts");
      std::string digits = std::to_string(v);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      out.push_back(digits);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// One host pattern ("rack[1-2]-n[01-02]") -> its names, bracket groups expanded as a product.
std::vector<std::string> expand_pattern(const std::string& pattern, const std::string& list,
                                        size_t max_hosts, bool first_only) {
  std::vector<std::string> names{""};
  size_t pos = 0;
  while (pos < pattern.size()) {
    size_t open = pattern.find('[', pos);
    std::string literal =
        pattern.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    FURLONG_CHECK(literal.find(']') == std::string::npos, "Slurm node list '", list,
                  "' has a ']' without '['");
    for (auto& n : names) n += literal;
    if (open == std::string::npos) break;
    size_t close = pattern.find(']', open);
    std::string set = pattern.substr(open + 1, close - open - 1);
    // The first host needs only the first bound of each group ("01" of "01-04,07").
    if (first_only) set = set.substr(0, std::min(set.find(','), set.find('-')));
    auto members = expand_range_set(set, list, max_hosts);
    std::vector<std::string> next;
    for (const auto& n : names) {
      for (const auto& m : members) {
        FURLONG_CHECK(next.size() < max_hosts, "Slurm node list '", list, "' names more than ",
                      max_hosts, " hosts");
        next.push_back(n + m);
      }
    }
    names = std::move(next);
    pos = close + 1;
  }
  return names;
}

}  // namespace

std::vector<std::string> expand_slurm_nodelist(const std::string& list, size_t max_hosts) {
  FURLONG_CHECK(!list.empty(), "the Slurm node list is empty");
  std::vector<std::string> hosts;
  for (const auto& pattern : split_top_level(list)) {
    for (auto& h : expand_pattern(pattern, list, max_hosts, false)) {
      FURLONG_CHECK(hosts.size() < max_hosts, "Slurm node list '", list, "' names more than ",
                    max_hosts, " hosts");
      hosts.push_back(std::move(h));
    }
  }
  return hosts;
}

std::string first_slurm_host(const std::string& list) {
  FURLONG_CHECK(!list.empty(), "the Slurm node list is empty");
  return expand_pattern(split_top_level(list).front(), list, 1, true).front();
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& text) {
  std::vector<int> counts;
  size_t start = 0;
  auto bad = [&](const std::string& item) {
    FURLONG_FAIL("environment variable SLURM_TASKS_PER_NODE='", text, "': '", item,
                 "' is not a count or count(xN), as in 2(x3),1");
  };
  while (true) {
    size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::string count = item, times = "1";
    size_t paren = item.find("(x");
    if (paren != std::string::npos) {
      if (item.back() != ')') bad(item);
      count = item.substr(0, paren);
      times = item.substr(paren + 2, item.size() - paren - 3);
    }
    if (!all_digits(count) || !all_digits(times) || count.size() > 6 || times.size() > 6) {
      bad(item);
    }
    int c = std::stoi(count), n = std::stoi(times);
    if (c < 1 || n < 1) bad(item);
    FURLONG_CHECK(counts.size() + static_cast<size_t>(n) <= 1000000,
                  "environment variable SLURM_TASKS_PER_NODE='", text, "' names too many nodes");
    counts.insert(counts.end(), static_cast<size_t>(n), c);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return counts;
}

}  // namespace furlong::dist
