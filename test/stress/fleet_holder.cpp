// Fleet holder names (fleet.hpp): shared by the fleet's processes, which
// make them, and the checker, which reads the process back out of the
// server's record of a grant.
#include <stdexcept>
#include <string>
#include <vector>

#include "common.hpp"
#include "fleet.hpp"

namespace pg_fencing::stress {

std::string FleetHolder(int slot, int incarnation, int candidate, int generation) {
  return "f" + std::to_string(slot) + "." + std::to_string(incarnation) + "." +
         std::to_string(candidate) + "." + std::to_string(generation);
}

bool ParseFleetHolder(const std::string &holder, int &slot, int &incarnation) {
  if (holder.size() < 2 || holder[0] != 'f') return false;
  const std::vector<std::string> parts = Split(std::string_view(holder).substr(1), '.');
  if (parts.size() != 4) return false;
  try {
    slot = std::stoi(parts[0]);
    incarnation = std::stoi(parts[1]);
  } catch (const std::exception &) {
    return false;
  }
  return true;
}

}  // namespace pg_fencing::stress
