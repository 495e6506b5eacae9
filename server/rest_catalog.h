// GET /v1/catalog: what a spec can name, resolved. The model presets (search/presets.h)
// with every architecture field, the device profiles (search/device_catalog.h) with every
// figure the models use, and the precisions.
#ifndef PARATUNE_SERVER_REST_CATALOG_H_
#define PARATUNE_SERVER_REST_CATALOG_H_

#include <string>

namespace paratune::server {

/// {"presets": [{"name", "model": ModelSpec}], "devices": [DeviceProfile],
///  "precisions": [string]}. ModelSpec in the proto JSON mapping (int64 as decimal
/// strings), as in a Job's spec; DeviceProfile fields as named in search/device_catalog.h
/// (bytes, bytes/s, seconds, TFLOP/s). Built once; thread-safe.
const std::string& CatalogJson();

}  // namespace paratune::server

#endif  // PARATUNE_SERVER_REST_CATALOG_H_
