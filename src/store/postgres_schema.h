// The PostgreSQL store's schema as versioned migrations, the same versions as SQLite's
// (sqlite_schema.h) with the same meaning: migration i brings the schema from version i to i + 1
// (postgres_store.cpp applies the missing ones at open, all in one transaction). Constant data.
#pragma once

#include <span>

namespace allot::store {

// Never edit a migration that has shipped; append a new one, and its SQLite twin.
extern const std::span<const char* const> kPostgresMigrations;

}  // namespace allot::store
