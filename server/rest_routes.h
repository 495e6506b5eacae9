// The REST gateway's routes, registered in phases by RestGateway::RegisterRoutes:
// the Autotuner API (rest_routes_jobs.cc), the operations endpoints and httplib's own
// error answers (rest_gateway.cc), the dashboard (rest_dashboard.h).
#ifndef PARATUNE_SERVER_REST_ROUTES_H_
#define PARATUNE_SERVER_REST_ROUTES_H_

#include <cstddef>

#include "server/handlers.h"
#include "server/metrics.h"
#include "server/rest_common.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace paratune::server {

/// /v1/jobs (submit, list), /v1/jobs/{id} (get), /v1/jobs/{id}/results,
/// /v1/jobs/{id}/results/{rank}:export, /v1/jobs/{id}:cancel, /v1/workers. `handler` may
/// be null when context.has_handler is false (the routes then answer 503).
void RegisterJobRoutes(httplib::Server& server, const ApiContext& context,
                       AutotunerHandler* handler);

/// /v1/catalog: presets, devices, precisions (served without a job manager).
void RegisterCatalogRoutes(httplib::Server& server, const ApiContext& context);

/// /healthz, /openapi.json, /metrics (no token needed).
void RegisterOpsRoutes(httplib::Server& server, Metrics* metrics);

/// Gzip negotiation before routing, JSON bodies for httplib's own errors (404, 413, 400,
/// 414), JSON for exceptions. `max_body_bytes` is named in the 413 message.
void InstallHttpHandlers(httplib::Server& server, size_t max_body_bytes);

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_REST_ROUTES_H_
