// Browser sessions (api_session.cc, Auth's cookie path), in-process through
// http::Server::Dispatch on a FakeClock: login, the cookie's attributes,
// CSRF, expiry, logout, rate limits, scopes, and Cookie header parsing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/files.h"
#include "server/server.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;

class SessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spdlog::set_level(spdlog::level::warn);
    dir_ = std::filesystem::temp_directory_path() /
           ("rm_session_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    ServerOptions o;
    o.data_dir = dir_.string();
    o.listen = false;
    o.clock = &clock_;
    o.session_ttl_ms = 3'600'000;
    server_ = std::make_unique<Server>(o);
    Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    admin_ = ReadFile((dir_ / "admin.token").string()).value();
    admin_.pop_back();
    http::Response alice = Call("POST", "/api/v1/users", {{"authorization", "Bearer " + admin_}},
                                R"({"name":"alice","password":"correct horse"})");
    ASSERT_EQ(alice.status, 201) << alice.body;
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  http::Response Call(const std::string& method, const std::string& target,
                      std::vector<std::pair<std::string, std::string>> headers = {}, const std::string& body = "",
                      const std::string& remote = "127.0.0.1") {
    http::Request r;
    r.method = method;
    r.target = target;
    r.remote = remote;
    r.headers = std::move(headers);
    r.body = body;
    http::Response got;
    got.status = 0;
    server_->http()->Dispatch(std::move(r), [&](http::Response res) { got = std::move(res); });
    return got;
  }
  static std::string HeaderOf(const http::Response& r, const std::string& name) {
    for (const auto& [k, v] : r.headers) {
      if (k == name) return v;
    }
    return "";
  }
  // Logs alice in; returns the cookie's value and the CSRF token.
  std::pair<std::string, std::string> LogIn(const std::string& body = R"({"user":"alice","password":"correct horse"})") {
    http::Response r = Call("POST", "/api/v1/session", {}, body);
    EXPECT_EQ(r.status, 201) << r.body;
    const std::string cookie = HeaderOf(r, "Set-Cookie");
    const size_t eq = cookie.find('='), semi = cookie.find(';');
    if (r.status != 201 || eq == std::string::npos) return {"", ""};
    return {cookie.substr(eq + 1, semi - eq - 1), json::parse(r.body)["csrf"].get<std::string>()};
  }
  std::string MakeToken(const std::string& user, const std::string& scope) {
    json body = {{"user", user}, {"scope", scope}};
    if (scope == "agent") body["node"] = "node-1";
    http::Response r = Call("POST", "/api/v1/tokens", {{"authorization", "Bearer " + admin_}}, body.dump());
    EXPECT_EQ(r.status, 201) << r.body;
    return r.status == 201 ? json::parse(r.body)["token"].get<std::string>() : "";
  }
  static std::pair<std::string, std::string> Cookie(const std::string& secret) { return {"cookie", "rm_session=" + secret}; }

  FakeClock clock_;
  std::filesystem::path dir_;
  std::unique_ptr<Server> server_;
  std::string admin_;
};

TEST_F(SessionTest, LoginSetsAStrictHttpOnlyCookieAndAnswersWhoAndTheCsrfToken) {
  http::Response r = Call("POST", "/api/v1/session", {}, R"({"user":"alice","password":"correct horse"})");
  ASSERT_EQ(r.status, 201) << r.body;
  const std::string cookie = HeaderOf(r, "Set-Cookie");
  EXPECT_EQ(cookie.rfind("rm_session=rm_", 0), 0u) << cookie;
  EXPECT_NE(cookie.find("; Path=/;"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("; HttpOnly"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("; SameSite=Strict"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("; Max-Age=3600"), std::string::npos) << cookie;
  EXPECT_EQ(cookie.find("Secure"), std::string::npos) << "plain HTTP: " << cookie;
  json body = json::parse(r.body);
  EXPECT_EQ(body["user"]["name"], "alice");
  EXPECT_EQ(body["user"]["role"], "user");
  EXPECT_EQ(body["csrf"].get<std::string>().size(), 64u);
  EXPECT_EQ(body["expires_at"], FormatTimeUtc(clock_.NowMs() + 3'600'000));

  // The session is a token the user can see and revoke; its audit entry is there.
  const std::string secret = cookie.substr(11, cookie.find(';') - 11);
  http::Response tokens = Call("GET", "/api/v1/tokens", {Cookie(secret)});
  ASSERT_EQ(tokens.status, 200) << tokens.body;
  json t = json::parse(tokens.body)["tokens"][0];
  EXPECT_EQ(t["name"], "session");
  EXPECT_EQ(t["session"], true);
  EXPECT_EQ(t["expires_at"], body["expires_at"]);
  http::Response audit = Call("GET", "/api/v1/audit?action=session.login", {{"authorization", "Bearer " + admin_}});
  EXPECT_NE(audit.body.find("\"ok\""), std::string::npos) << audit.body;
}

TEST_F(SessionTest, TheCookieAuthenticatesReadsAndChangesNeedTheCsrfHeader) {
  auto [secret, csrf] = LogIn();
  http::Response whoami = Call("GET", "/api/v1/session", {Cookie(secret)});
  ASSERT_EQ(whoami.status, 200) << whoami.body;
  EXPECT_EQ(json::parse(whoami.body)["csrf"], csrf);  // the same token every time
  EXPECT_EQ(Call("GET", "/api/v1/jobs", {Cookie(secret)}).status, 200);

  const std::string spec = "command: [echo, hi]\n";
  http::Response none = Call("POST", "/api/v1/jobs", {Cookie(secret), {"content-type", "application/yaml"}}, spec);
  EXPECT_EQ(none.status, 403);
  EXPECT_EQ(json::parse(none.body)["error"]["message"], "csrf: missing or wrong X-CSRF-Token header");
  std::string wrong = csrf;
  wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
  EXPECT_EQ(Call("POST", "/api/v1/jobs", {Cookie(secret), {"x-csrf-token", wrong}}, spec).status, 403);
  // Another session's CSRF token is no good either.
  auto [other_secret, other_csrf] = LogIn();
  EXPECT_EQ(Call("POST", "/api/v1/jobs", {Cookie(secret), {"x-csrf-token", other_csrf}}, spec).status, 403);
  http::Response ok = Call("POST", "/api/v1/jobs", {Cookie(secret), {"x-csrf-token", csrf}}, spec);
  EXPECT_EQ(ok.status, 201) << ok.body;

  // A bearer token wins over the cookie, and needs no CSRF header.
  const std::string token = MakeToken("alice", "submit");
  EXPECT_EQ(Call("POST", "/api/v1/jobs", {Cookie(secret), {"authorization", "Bearer " + token}}, spec).status, 201);
  // ... and a session is only for those who have one.
  EXPECT_EQ(Call("GET", "/api/v1/session", {{"authorization", "Bearer " + token}}).status, 401);
}

TEST_F(SessionTest, LogoutRevokesTheSessionAndClearsTheCookie) {
  auto [secret, csrf] = LogIn();
  EXPECT_EQ(Call("DELETE", "/api/v1/session", {Cookie(secret)}).status, 403);  // no CSRF header
  http::Response out = Call("DELETE", "/api/v1/session", {Cookie(secret), {"x-csrf-token", csrf}});
  ASSERT_EQ(out.status, 200) << out.body;
  EXPECT_EQ(json::parse(out.body)["ended"], true);
  EXPECT_NE(HeaderOf(out, "Set-Cookie").find("rm_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
            std::string::npos)
      << HeaderOf(out, "Set-Cookie");
  EXPECT_EQ(Call("GET", "/api/v1/session", {Cookie(secret)}).status, 401);
  EXPECT_EQ(Call("GET", "/api/v1/jobs", {Cookie(secret)}).status, 401);
}

TEST_F(SessionTest, ASessionExpiresAfterItsTtlAndItsRowGoes) {
  auto [secret, csrf] = LogIn();
  clock_.AdvanceMs(3'600'000 - 1000);
  EXPECT_EQ(Call("GET", "/api/v1/jobs", {Cookie(secret)}).status, 200);
  clock_.AdvanceMs(1000);
  http::Response r = Call("GET", "/api/v1/jobs", {Cookie(secret)});
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("session expired"), std::string::npos) << r.body;
  http::Response tokens = Call("GET", "/api/v1/tokens?user=alice", {{"authorization", "Bearer " + admin_}});
  EXPECT_EQ(json::parse(tokens.body)["tokens"].size(), 0u) << tokens.body;
}

TEST_F(SessionTest, DisablingTheUserEndsTheirSessions) {
  auto [secret, csrf] = LogIn();
  ASSERT_EQ(Call("GET", "/api/v1/jobs", {Cookie(secret)}).status, 200);
  http::Response off = Call("POST", "/api/v1/users/alice/disable", {{"authorization", "Bearer " + admin_}});
  ASSERT_EQ(off.status, 200) << off.body;
  EXPECT_EQ(Call("GET", "/api/v1/jobs", {Cookie(secret)}).status, 401);
}

TEST_F(SessionTest, WrongPasswordAndUnknownUserGetTheSameAnswerThenTheRateLimit) {
  http::Response wrong = Call("POST", "/api/v1/session", {}, R"({"user":"alice","password":"nope"})");
  http::Response unknown = Call("POST", "/api/v1/session", {}, R"({"user":"mallory","password":"nope"})");
  EXPECT_EQ(wrong.status, 401);
  EXPECT_EQ(unknown.status, 401);
  EXPECT_EQ(json::parse(wrong.body)["error"]["message"], "wrong user name or password");
  EXPECT_EQ(wrong.body, unknown.body);
  EXPECT_EQ(HeaderOf(wrong, "Set-Cookie"), "");
  EXPECT_EQ(Call("POST", "/api/v1/session", {}, R"({"user":"alice"})").status, 401);  // no password at all
  for (int i = 0; i < 3; ++i) Call("POST", "/api/v1/session", {}, R"({"user":"alice","password":"nope"})");
  http::Response locked = Call("POST", "/api/v1/session", {}, R"({"user":"alice","password":"correct horse"})");
  EXPECT_EQ(locked.status, 429) << locked.body;
  EXPECT_NE(locked.body.find("try again in"), std::string::npos) << locked.body;
  // The same limiter as HTTP Basic logins: alice is locked there too.
  http::Response basic = Call("POST", "/api/v1/tokens",
                              {{"authorization", "Basic " + std::string("YWxpY2U6Y29ycmVjdCBob3JzZQ==")}}, "{}");
  EXPECT_EQ(basic.status, 429) << basic.body;
}

// Failures against one name, or sprayed over many names from a shared address
// (every local process is loopback), do not lock out a name that has logged in
// from that address before; the sprayed name and new names are limited.
TEST_F(SessionTest, LoginLimitsLockTheGuessedNameNotTheAddressesKnownNames) {
  http::Response bob = Call("POST", "/api/v1/users", {{"authorization", "Bearer " + admin_}},
                            R"({"name":"bob","password":"battery staple"})");
  ASSERT_EQ(bob.status, 201) << bob.body;
  auto login = [&](const std::string& user, const std::string& password, const std::string& from = "127.0.0.1") {
    return Call("POST", "/api/v1/session", {}, json{{"user", user}, {"password", password}}.dump(), from).status;
  };
  EXPECT_EQ(login("bob", "battery staple"), 201);
  for (int i = 0; i < 6; ++i) login("alice", "nope");
  EXPECT_EQ(login("alice", "correct horse"), 429);  // the guessed name is limited
  for (int i = 0; i < 40; ++i) EXPECT_EQ(login("spray" + std::to_string(i), "nope", "127.0.0." + std::to_string(2 + i)), 401);
  EXPECT_EQ(login("bob", "battery staple", "127.0.0.9"), 201);  // all of loopback is one address; bob is known there
  for (int i = 40; i < 120; ++i) login("spray" + std::to_string(i), "nope");
  EXPECT_EQ(login("bob", "battery staple"), 201);
  http::Response carol = Call("POST", "/api/v1/session", {}, R"({"user":"carol","password":"x"})");
  EXPECT_EQ(carol.status, 429) << carol.body;  // a name new to the address waits out the spray
  EXPECT_NE(carol.body.find("too many failed logins from"), std::string::npos) << carol.body;
  EXPECT_EQ(login("alice", "correct horse", "10.1.2.3"), 429);  // still locked from anywhere
}

// A stranger guessing a name from elsewhere locks the name there, not at the
// addresses its owner logs in from; guesses at the owner's address lock it there.
TEST_F(SessionTest, AStrangersGuessesDoNotLockANameOutOfItsOwnersAddress) {
  auto login = [&](const std::string& password, const std::string& from) {
    return Call("POST", "/api/v1/session", {}, json{{"user", "alice"}, {"password", password}}.dump(), from).status;
  };
  EXPECT_EQ(login("correct horse", "127.0.0.1"), 201);
  for (int i = 0; i < 6; ++i) EXPECT_NE(login("nope", "10.9.9.9"), 201);
  EXPECT_EQ(login("correct horse", "10.9.9.9"), 429);   // locked where it was guessed
  EXPECT_EQ(login("correct horse", "10.7.7.7"), 429);   // and wherever alice is not known
  EXPECT_EQ(login("correct horse", "127.0.0.1"), 201);  // not at her own address
  for (int i = 0; i < 6; ++i) EXPECT_NE(login("nope", "127.0.0.1"), 201);
  EXPECT_EQ(login("correct horse", "127.0.0.1"), 429);  // guesses there count there
}

// Responses that carry a credential are never cached.
TEST_F(SessionTest, ResponsesCarryingTokensAreNotCached) {
  http::Response made = Call("POST", "/api/v1/tokens", {{"authorization", "Bearer " + admin_}}, R"({"name":"ci"})");
  ASSERT_EQ(made.status, 201) << made.body;
  EXPECT_EQ(HeaderOf(made, "Cache-Control"), "no-store");
  http::Response basic = Call("POST", "/api/v1/tokens",
                              {{"authorization", "Basic " + std::string("YWxpY2U6Y29ycmVjdCBob3JzZQ==")}}, "{}");
  ASSERT_EQ(basic.status, 201) << basic.body;
  EXPECT_EQ(HeaderOf(basic, "Cache-Control"), "no-store");
  http::Response session = Call("POST", "/api/v1/session", {}, R"({"user":"alice","password":"correct horse"})");
  ASSERT_EQ(session.status, 201) << session.body;
  EXPECT_EQ(HeaderOf(session, "Cache-Control"), "no-store");
}

TEST_F(SessionTest, ATokenLoginNeverGainsScope) {
  const std::string read = MakeToken("alice", "read");
  auto [secret, csrf] = LogIn(json{{"token", read}}.dump());
  http::Response who = Call("GET", "/api/v1/session", {Cookie(secret)});
  ASSERT_EQ(who.status, 200);
  const std::string spec = "command: [echo, hi]\n";
  http::Response submit = Call("POST", "/api/v1/jobs", {Cookie(secret), {"x-csrf-token", csrf}}, spec);
  EXPECT_EQ(submit.status, 403) << submit.body;
  EXPECT_NE(submit.body.find("scope is read"), std::string::npos) << submit.body;
  // Agent and metrics tokens, sessions themselves and unknown tokens start none.
  EXPECT_EQ(Call("POST", "/api/v1/session", {}, json{{"token", MakeToken("admin", "agent")}}.dump()).status, 403);
  EXPECT_EQ(Call("POST", "/api/v1/session", {}, json{{"token", MakeToken("admin", "metrics")}}.dump()).status, 403);
  EXPECT_EQ(Call("POST", "/api/v1/session", {}, json{{"token", secret}}.dump()).status, 403);
  EXPECT_EQ(Call("POST", "/api/v1/session", {}, json{{"token", "rm_nonsense"}}.dump()).status, 401);
}

TEST_F(SessionTest, AnAdminsSessionIsAdminAndSubmitTokensStaySubmit) {
  const std::string submit = MakeToken("admin", "submit");
  auto [secret, csrf] = LogIn(json{{"token", submit}}.dump());
  EXPECT_EQ(Call("GET", "/api/v1/users", {Cookie(secret)}).status, 403);
  auto [admin_secret, admin_csrf] = LogIn(json{{"token", admin_}}.dump());
  EXPECT_EQ(Call("GET", "/api/v1/users", {Cookie(admin_secret)}).status, 200);
}

TEST_F(SessionTest, ACookieNeverReachesAgentMetricsOrRegistryRoutes) {
  auto [secret, csrf] = LogIn(json{{"token", admin_}}.dump());
  http::Response agent = Call("POST", "/api/v1/agent/register", {Cookie(secret), {"x-csrf-token", csrf}},
                              R"({"name":"n1","cpu_milli":1000,"memory_bytes":1000000})");
  EXPECT_EQ(agent.status, 403) << agent.body;
  EXPECT_EQ(Call("GET", "/metrics", {Cookie(secret)}).status, 403);
  EXPECT_EQ(Call("GET", "/v2/", {Cookie(secret)}).status, 403);
  // An API token in the cookie is not a session.
  EXPECT_EQ(Call("GET", "/api/v1/jobs", {Cookie(admin_)}).status, 401);
}

TEST_F(SessionTest, AProxyRouteTakesTheCookieWithoutCsrfButNeedsSubmit) {
  http::RouteOptions proxy;
  proxy.access = access::kProxy;
  server_->http()->Route("POST", "/test/proxy", proxy, [](http::Request&, http::Responder respond) {
    respond(http::Response{});
  });
  auto [secret, csrf] = LogIn();
  EXPECT_EQ(Call("POST", "/test/proxy", {Cookie(secret)}).status, 200);
  EXPECT_EQ(Call("POST", "/test/proxy", {}).status, 401);
  auto [read_secret, read_csrf] = LogIn(json{{"token", MakeToken("alice", "read")}}.dump());
  EXPECT_EQ(Call("POST", "/test/proxy", {Cookie(read_secret)}).status, 403);
}

TEST_F(SessionTest, LoginsPileUpNoFurtherThanTheCap) {
  std::string first;
  for (size_t i = 0; i < Auth::kMaxSessionsPerUser + 2; ++i) {
    auto [secret, csrf] = LogIn();
    if (i == 0) first = secret;
  }
  http::Response tokens = Call("GET", "/api/v1/tokens?user=alice", {{"authorization", "Bearer " + admin_}});
  EXPECT_EQ(json::parse(tokens.body)["tokens"].size(), Auth::kMaxSessionsPerUser);
  EXPECT_EQ(Call("GET", "/api/v1/jobs", {Cookie(first)}).status, 401);  // the oldest went
}

http::Request WithCookies(std::vector<std::string> headers) {
  http::Request r;
  for (auto& h : headers) r.headers.emplace_back("cookie", std::move(h));
  return r;
}

TEST(CookieValueTest, ReadsTheNamedCookieAmongOthersLeniently) {
  auto get = [](std::vector<std::string> h) { return CookieValue(WithCookies(std::move(h)), "rm_session"); };
  EXPECT_EQ(get({})->has_value(), false);
  EXPECT_EQ(get({"theme=dark"})->has_value(), false);
  EXPECT_EQ(**get({"rm_session=abc"}), "abc");
  EXPECT_EQ(**get({"theme=dark; rm_session=abc; lang=en"}), "abc");
  EXPECT_EQ(**get({"theme=dark;rm_session=abc"}), "abc");
  EXPECT_EQ(**get({"  rm_session = abc  ;"}), "abc");
  EXPECT_EQ(**get({"rm_session=\"abc\""}), "abc");
  EXPECT_EQ(**get({"x_rm_session=evil; rm_sessionx=evil; rm_session=abc"}), "abc");
  EXPECT_EQ(**get({"flag; =x; rm_session=abc"}), "abc");
  EXPECT_EQ(**get({"a=b", "rm_session=abc"}), "abc");  // several Cookie headers
  EXPECT_EQ(**get({"rm_session=abc; rm_session=abc"}), "abc");
  EXPECT_EQ(**get({"rm_session="}), "");
  // Two different values (one set for a narrower path): refused, not guessed.
  EXPECT_EQ(get({"rm_session=abc; rm_session=def"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(get({"rm_session=abc", "rm_session=def"}).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SessionTest, AFailedLoginWithJunkInItsNameIsAuditedAsPrintableText) {
  // A name holding bytes no store keeps as text: a NUL (JSON's \u0000) in a
  // session login, a lone 0xff in HTTP Basic. Each login fails, and the audit
  // log still records it, the bytes escaped.
  http::Response r = Call("POST", "/api/v1/session", {}, R"({"user":"alice\u0000x","password":"correct horse"})");
  EXPECT_EQ(r.status, 401) << r.body;
  // "al\xffice:x" in base64.
  r = Call("POST", "/api/v1/tokens", {{"authorization", "Basic YWz/aWNlOng="}}, "{}");
  EXPECT_EQ(r.status, 401) << r.body;
  http::Response audit = Call("GET", "/api/v1/audit?limit=50", {{"authorization", "Bearer " + admin_}});
  ASSERT_EQ(audit.status, 200) << audit.body;
  const std::string entries = json::parse(audit.body)["entries"].dump();
  EXPECT_NE(entries.find(R"(user alice\\x00x)"), std::string::npos) << entries;
  EXPECT_NE(entries.find(R"(user al\\xffice)"), std::string::npos) << entries;
}

// A login name carrying terminal controls (ESC, C1's CSI, a bidi override) is
// audited with every one of them escaped, so `ringmaster audit` shows text.
TEST_F(SessionTest, AFailedLoginsTerminalControlsAreAuditedEscaped) {
  http::Response r = Call("POST", "/api/v1/session", {},
                          R"({"user":"eve\u001b[2J\u009b31m\u202eadmin","password":"x"})");
  EXPECT_EQ(r.status, 401) << r.body;
  http::Response audit = Call("GET", "/api/v1/audit?limit=50", {{"authorization", "Bearer " + admin_}});
  ASSERT_EQ(audit.status, 200) << audit.body;
  bool found = false;
  const json entries = json::parse(audit.body)["entries"];
  for (const auto& e : entries) {
    const std::string target = e.value("target", "");
    if (target.rfind("user eve", 0) != 0) continue;
    found = true;
    EXPECT_EQ(target, R"(user eve\x1b[2J\u009b31m\u202eadmin)");
  }
  EXPECT_TRUE(found) << audit.body;
}

}  // namespace
}  // namespace ringmaster::server
