# PGXS build of the pg_fencing extension: build, install, pg_regress,
# isolation and TAP tests.  The GoogleTest suite, the client library and the
# demo are built by CMakeLists.txt.
EXTENSION = pg_fencing
MODULE_big = pg_fencing
DATA = $(wildcard extension/pg_fencing--*.sql)

CORE_SRCS = $(wildcard src/core/*.cpp)
BACKEND_SRCS = $(wildcard src/backend/*.cpp)
OBJS = $(CORE_SRCS:.cpp=.o) $(BACKEND_SRCS:.cpp=.o)

# pg_regress: sql/NAME.sql against expected/NAME.out.
REGRESS = $(patsubst sql/%.sql,%,$(sort $(wildcard sql/*.sql)))
REGRESS_OPTS = --load-extension=pg_fencing

# pg_isolation_regress: test/isolation/specs/NAME.spec.
ISOLATION = $(patsubst test/isolation/specs/%.spec,%,$(sort $(wildcard test/isolation/specs/*.spec)))
ISOLATION_OPTS = --inputdir=test/isolation --load-extension=pg_fencing

# PostgreSQL::Test::Cluster TAP tests: test/t/*.pl.
TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

PG_CPPFLAGS = -Iinclude -Isrc/core -Isrc/backend
PG_CXXFLAGS = -std=c++17 -Wall -Wextra -Werror -fno-omit-frame-pointer
SHLIB_LINK = -lstdc++

# PGXS does not track header dependencies: rebuild every object when a
# header changes (the headers are few and shared by most files).  Not named
# HEADERS: PGXS installs the files that variable lists into the server's
# include directory.
OWN_HEADERS = $(wildcard include/pg_fencing/*.hpp src/core/*.hpp src/backend/*.hpp)

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# PGXS passes PG_CXXFLAGS to g++ but not to clang's bitcode rule for JIT
# inlining; give it the same language level.
BITCODE_CXXFLAGS += -std=c++17 -Wno-register

$(OBJS) $(OBJS:.o=.bc): $(OWN_HEADERS)

# PostgreSQL's headers use "register" (gone in C++17) and trip a few of
# -Wextra's warnings in macros that are not ours.
override CXXFLAGS += -Wno-register -Wno-missing-field-initializers -Wno-unused-parameter -Wno-cast-function-type

.PHONY: clean-tests
clean: clean-tests
clean-tests:
	rm -rf results output_iso tmp_check regression.diffs regression.out
