// The web dashboard (web/, compiled in: server/web_assets.h) on the API's port: its files, and
// the app's index for every other path outside /api/ (the app routes itself: /queue, /jobs/17),
// so that a reload or a shared link lands on the right page. It needs no token: the files hold
// nothing secret, and the app sends the token the person pastes with each API request.

#include "server/api_impl.h"
#include "server/web_assets.h"

namespace allot::server {

void ApiServer::Impl::install_dashboard_routes() {
  install_view_routes();
  if (!svr) return;  // listing only: the files are not API routes (docs/openapi.yaml)
  auto serve = [](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Content-Security-Policy", std::string(kDashboardCsp));
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("Referrer-Policy", "no-referrer");
    res.set_header("X-Frame-Options", "DENY");
    auto a = web_lookup(req.path);
    if (!a) return send_error(res, 404, "path", "no such file " + req.path);
    // The names carry no version: the browser asks again each time, and a 304 answers it while
    // the binary (so the bytes) is the same.
    res.set_header("Cache-Control", "no-cache");
    res.set_header("ETag", a->etag);
    if (req.get_header_value("If-None-Match") == a->etag) {
      res.status = 304;
      return;
    }
    res.set_content(a->asset->body.data(), a->asset->body.size(), std::string(a->content_type));
  };
  // Registered last: every route of the API is matched before it. /api/... never reaches it, so
  // an unknown API path keeps its JSON 404.
  svr->Get(R"(/(?!api(?:/|$))[A-Za-z0-9._~/-]*)", serve);
}

}  // namespace allot::server
