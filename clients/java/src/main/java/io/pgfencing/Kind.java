package io.pgfencing;

/** What a lease is of a lock: the SQL that takes it, and how messages name it. */
enum Kind {
    EXCLUSIVE("exclusive"), SHARED("shared"), PERMIT("permit");

    final String sqlName;

    Kind(String sqlName) {
        this.sqlName = sqlName;
    }

    String describe(String lockName) {
        switch (this) {
            case PERMIT: return "a permit of semaphore \"" + lockName + "\"";
            case SHARED: return "lock \"" + lockName + "\" (shared)";
            default: return "lock \"" + lockName + "\"";
        }
    }

    String busy(String lockName) {
        return describe(lockName) + (this == PERMIT ? ": every permit is taken"
                : " is held by another holder");
    }
}
