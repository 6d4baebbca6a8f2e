// The worker side of the demo: what this program does when the orchestrator
// starts it with --worker.
#pragma once

#include "options.hpp"

namespace pg_fencing::demo {

// Plays the role in `options`, reporting on the event pipe; returns the
// process exit status.
int RunWorker(const WorkerOptions &options);

}  // namespace pg_fencing::demo
