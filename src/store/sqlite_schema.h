// The SQLite store's schema as versioned migrations: migration i brings the schema from version
// i to i + 1 (sqlite_store.cpp applies the missing ones at open). Constant data; any thread.
#pragma once

#include <span>

namespace allot::store {

// Never edit a migration that has shipped; append a new one.
extern const std::span<const char* const> kSqliteMigrations;

}  // namespace allot::store
