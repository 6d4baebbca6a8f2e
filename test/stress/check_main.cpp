// pg_fencing_stress_check RUN_DIR [--examples N]: checks a run directory
// written by pg_fencing_stress (any mode, fleet included) again, offline (the logs and the server's
// history are all in it).  Exit status: 0 no violation, 1 violations, 2 error.
#include <iostream>
#include <string>

#include "checker.hpp"
#include "common.hpp"
#include "fleet_checker.hpp"

int main(int argc, char **argv) {
  pg_fencing::stress::CheckOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--examples" && i + 1 < argc) {
      options.examples = std::stoi(argv[++i]);
    } else if (arg == "--help" || arg == "-h") {
      std::cout << "usage: pg_fencing_stress_check RUN_DIR [--examples N]\n";
      return 0;
    } else if (options.run_dir.empty() && arg.rfind("--", 0) != 0) {
      options.run_dir = arg;
    } else {
      std::cerr << "usage: pg_fencing_stress_check RUN_DIR [--examples N]\n";
      return 2;
    }
  }
  if (options.run_dir.empty()) {
    std::cerr << "usage: pg_fencing_stress_check RUN_DIR [--examples N]\n";
    return 2;
  }
  try {
    // A fleet run (meta.txt mode=fleet) has a checker of its own.
    const std::string meta = pg_fencing::stress::ReadFile(options.run_dir + "/meta.txt");
    const bool fleet = meta.rfind("mode=fleet\n", 0) == 0;
    const long violations = fleet ? pg_fencing::stress::CheckFleetRun(options, std::cout)
                                  : pg_fencing::stress::CheckRun(options, std::cout);
    return violations == 0 ? 0 : 1;
  } catch (const std::exception &error) {
    std::cerr << "pg_fencing_stress_check: " << error.what() << "\n";
    return 2;
  }
}
