// The Autotuner API routes: request parsing (rest_requests.h) → AutotunerHandler → JSON.
#include <httplib.h>

#include <string>

#include "server/limits.h"
#include "server/rest_catalog.h"
#include "server/rest_export.h"
#include "server/rest_requests.h"
#include "server/rest_routes.h"

namespace paratune::server {

void RegisterJobRoutes(httplib::Server& server, const ApiContext& context,
                       AutotunerHandler* handler) {
  using Result = absl::StatusOr<RestBody>;
  server.Post("/v1/jobs", ApiRoute(context, "SubmitJob", [handler](const httplib::Request& req) {
                absl::StatusOr<v1::SubmitJobRequest> request = ParseSubmitBody(req.body);
                if (!request.ok()) return Result(request.status());
                if (absl::Status s = ValidateSubmitJobRequest(*request); !s.ok()) return Result(s);
                return JsonAnswer(handler->SubmitJob(*request));
              }));
  server.Get("/v1/jobs", ApiRoute(context, "ListJobs", [handler](const httplib::Request& req) {
               absl::StatusOr<v1::ListJobsRequest> request = ParseListJobsQuery(req);
               if (!request.ok()) return Result(request.status());
               if (absl::Status s = ValidateListJobsRequest(*request); !s.ok()) return Result(s);
               return JsonAnswer(handler->ListJobs(*request));
             }));
  server.Get(R"(/v1/jobs/([^/:]+))",
             ApiRoute(context, "GetJob", [handler](const httplib::Request& req) {
               v1::GetJobRequest request;
               request.set_id(req.matches[1].str());
               return JsonAnswer(handler->GetJob(request));
             }));
  server.Get(R"(/v1/jobs/([^/:]+)/results)",
             ApiRoute(context, "GetResults", [handler](const httplib::Request& req) {
               v1::GetResultsRequest request;
               request.set_id(req.matches[1].str());
               return JsonAnswer(handler->GetResults(request));
             }));
  server.Get(R"(/v1/jobs/([^/:]+)/results/([^/:]*):export)",
             ApiRoute(context, "ExportLayout", [handler](const httplib::Request& req) {
               absl::StatusOr<ExportRequest> request =
                   ParseExportRequest(req.matches[1].str(), req.matches[2].str(), req);
               if (!request.ok()) return Result(request.status());
               v1::GetResultsRequest results_request;
               results_request.set_id(request->job_id);
               absl::StatusOr<v1::JobResults> results = handler->GetResults(results_request);
               if (!results.ok()) return Result(results.status());
               v1::GetJobRequest job_request;
               job_request.set_id(request->job_id);
               absl::StatusOr<v1::Job> job = handler->GetJob(job_request);
               if (!job.ok()) return Result(job.status());
               return RenderExport(*request, *job, *results);
             }));
  server.Post(R"(/v1/jobs/([^/:]+):cancel)",
              ApiRoute(context, "CancelJob", [handler](const httplib::Request& req) {
                absl::StatusOr<v1::CancelJobRequest> request =
                    ParseCancelBody(req.body, req.matches[1].str());
                if (!request.ok()) return Result(request.status());
                return JsonAnswer(handler->CancelJob(*request));
              }));
  server.Get("/v1/workers", ApiRoute(context, "ListWorkers", [handler](const httplib::Request&) {
               return JsonAnswer(handler->ListWorkers(v1::ListWorkersRequest()));
             }));
}

void RegisterCatalogRoutes(httplib::Server& server, const ApiContext& context) {
  server.Get("/v1/catalog",
             ApiRoute(
                 context, "GetCatalog",
                 [](const httplib::Request& req) -> absl::StatusOr<RestBody> {
                   if (!req.params.empty()) {
                     return absl::InvalidArgumentError("GET /v1/catalog takes no query parameters");
                   }
                   return RestBody{CatalogJson(), kJsonType, ""};
                 },
                 /*needs_handler=*/false));
}

}  // namespace paratune::server
