// The lease engine (fencing_acquire, fencing_renew, fencing_release): see
// lease_engine.cpp.  Its entry points are SQL-callable C functions; nothing
// else calls into it.
#pragma once

#include "boundary.hpp"
