// The PostgreSQL store's URL: its own parameters taken out, the password
// never in a message. Needs no PostgreSQL.
#include <gtest/gtest.h>

#include <string>

#include "store/meta_store.h"
#include "store/postgres/connection.h"

namespace ringmaster::store::postgres {
namespace {

TEST(PgUrlTest, TheStoresOwnParametersAreTakenOut) {
  auto info = ParseUrl("postgres://rm:s3cret@db.example:5433/ringmaster?sslmode=require&pool=3&statement_timeout=2500");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->url, "postgres://rm:s3cret@db.example:5433/ringmaster?sslmode=require");
  EXPECT_EQ(info->pool, 3);
  EXPECT_EQ(info->statement_timeout_ms, 2500);
  EXPECT_EQ(info->redacted.find("s3cret"), std::string::npos);
  EXPECT_EQ(info->redacted, "postgres://rm:***@db.example:5433/ringmaster");
  info = ParseUrl("postgresql://rm@h/db");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->url, "postgresql://rm@h/db");
  EXPECT_EQ(info->pool, 8);
  EXPECT_FALSE(ParseUrl("postgres://h/db?pool=0").ok());
  EXPECT_FALSE(ParseUrl("postgres://h/db?pool=x").ok());
  EXPECT_FALSE(ParseUrl("postgres://h/db?statement_timeout=5").ok());
}

// What `ringmaster admin` prints: never a password, wherever the URL has it;
// for pg_dump, libpq's parameters only.
TEST(PgUrlTest, PrintedAndToolFormsHaveNoPassword) {
  const std::string url =
      "postgres://rm:s3cret@db.example:5433/ringmaster?sslmode=require&password=t0psecret&pool=3&statement_timeout=2500";
  EXPECT_EQ(RedactedStoreUrl(url), "postgres://rm:***@db.example:5433/ringmaster");
  EXPECT_EQ(RedactedStoreUrl("postgres://rm@h/db?password=t0psecret"), "postgres://rm@h/db");
  EXPECT_EQ(RedactedStoreUrl("postgres://rm:s3cret@h/db?pool=x"), "postgres://***");
  EXPECT_EQ(RedactedStoreUrl("sqlite:/var/lib/rm/meta.db"), "sqlite:/var/lib/rm/meta.db");
  auto tool = PostgresToolUrl(url);
  ASSERT_TRUE(tool.ok()) << tool.status().ToString();
  EXPECT_EQ(*tool, "postgres://rm@db.example:5433/ringmaster?sslmode=require");
  EXPECT_EQ(*PostgresToolUrl("postgresql://rm@h/db"), "postgresql://rm@h/db");
  EXPECT_FALSE(PostgresToolUrl("sqlite:x.db").ok());
}

TEST(PgUrlTest, AnUnreachableServerIsUnavailableAndItsMessageHasNoPassword) {
  // Port 1 on loopback: refused at once.
  auto s = OpenMetaStore("postgres://rm:s3cret@127.0.0.1:1/ringmaster");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnavailable) << s.status().ToString();
  EXPECT_EQ(s.status().ToString().find("s3cret"), std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().ToString().find("127.0.0.1"), std::string::npos);
}

}  // namespace
}  // namespace ringmaster::store::postgres
