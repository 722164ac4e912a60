#include "job_id.h"

#include <cctype>

namespace jobhost::host {

std::string jobIdProblem(const std::string& id) {
  if (id.empty() || id.size() > 64) return "it must have 1 to 64 characters";
  if (id.front() == '-') return "it must not start with '-'";
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_')
      return std::string("it may hold letters, digits, '-' and '_' only, not '") + c + "'";
  return {};
}

}  // namespace jobhost::host
