// Included last by every file of the core (src/core/*.cpp): fails the build
// if anything the file included brought in a PostgreSQL header (every one
// of them defines PG_VERSION_NUM through pg_config.h).  The core must build
// and be tested without a server, and must never call into one.
#ifdef PG_VERSION_NUM
#error "src/core must not include PostgreSQL headers: keep backend code in src/backend"
#endif
