#!/usr/bin/env python3
"""Writes server/openapi.json: the REST routes (below) and the JSON schemas of the messages
they carry, read from proto/paratune/v1/*.proto (proto3 JSON mapping, proto field names).

Run after changing a REST route or a message: `python3 server/openapi_gen.py`.
tests/server/rest_gateway_test (OpenApiTest) fails when the schemas and the protos differ.
"""
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
files = ['spec','results','job','service','inference']
msgs = {}; enums = {}; order = []
for f in files:
    lines = open(os.path.join(ROOT, 'proto', 'paratune', 'v1', f + '.proto')).read().split('\n')
    cur = None; comment = []; enum = None
    for ln in lines:
        s = ln.strip()
        if s.startswith('//'):
            comment.append(s[2:].strip()); continue
        m = re.match(r'message (\w+) \{', s)
        if m and cur is None:
            cur = m.group(1); msgs[cur] = {'desc': ' '.join(comment), 'fields': []}; order.append(cur); comment=[]
            if s.endswith('{}'): cur=None
            continue
        if s == 'message ListWorkersRequest {}': comment=[]; continue
        m = re.match(r'enum (\w+) \{', s)
        if m:
            enum = m.group(1); enums[enum] = {'desc': ' '.join(comment), 'values': []}; comment=[]; continue
        if enum and s == '}':
            enum = None; continue
        if enum:
            m = re.match(r'(\w+) = \d+;', s)
            if m: enums[enum]['values'].append(m.group(1))
            continue
        if cur and s == '}':
            cur = None; comment=[]; continue
        if cur:
            m = re.match(r'map<\w+, ?([\w.]+)> (\w+) = \d+;(?:\s*//\s*(.*))?', s)
            if m:
                desc = ' '.join(comment + ([m.group(3)] if m.group(3) else []))
                msgs[cur]['fields'].append(('map', m.group(1), m.group(2), desc))
                comment = []
                continue
            m = re.match(r'(repeated |optional )?([\w.]+) (\w+) = \d+;(?:\s*//\s*(.*))?', s)
            if m:
                desc = ' '.join(comment + ([m.group(4)] if m.group(4) else []))
                msgs[cur]['fields'].append((m.group(1) or '', m.group(2), m.group(3), desc))
            comment = []
            continue
        comment = []
def typ(t):
    if t in ('int64','uint64'): return {'type':'string','format':'int64','description':'int64: a decimal string; a JSON number is accepted on input'}
    if t in ('int32',): return {'type':'integer','format':'int32'}
    if t == 'double': return {'type':'number','format':'double'}
    if t == 'bool': return {'type':'boolean'}
    if t == 'string': return {'type':'string'}
    if t == 'google.protobuf.Timestamp': return {'type':'string','format':'date-time'}
    return {'$ref': f'#/components/schemas/{t}'}
schemas = {}
skip = {'RegisterRequest','RegisterResponse','HeartbeatRequest','HeartbeatResponse','LeaseTaskRequest','LeaseTaskResponse','ReportResultRequest','ReportResultResponse','DeregisterRequest','DeregisterResponse','WatchJobRequest','GetJobRequest','CancelJobRequest','GetResultsRequest','ListJobsRequest','ListWorkersRequest'}
for name in order:
    if name in skip: continue
    m = msgs[name]
    props = {}
    for lab, t, n, d in m['fields']:
        p = typ(t)
        if lab.strip() == 'repeated': p = {'type':'array','items':p}
        if lab == 'map': p = {'type':'object','additionalProperties':p}
        if d:
            if '$ref' in p: p = {'allOf':[p], 'description': d}
            elif 'description' in p: p['description'] = d + ' (' + p['description'] + ')'
            else: p['description'] = d
        props[n] = p
    sch = {'type':'object','properties':props,'additionalProperties':False}
    if m['desc']: sch['description'] = m['desc']
    schemas[name] = sch
for name, e in enums.items():
    if name not in ('JobState',): continue
    schemas[name] = {'type':'string','enum':e['values']}
    if e['desc']: schemas[name]['description'] = e['desc']
num = lambda d: {'type':'number','description':d}
schemas['CatalogDevice'] = {'type':'object','additionalProperties':False,
  'description':'A device profile (search/device_catalog.h): the figures the memory and time models use, and their source.',
  'properties':{
    'name':{'type':'string','description':'The value of cluster.gpu, e.g. "h100-sxm-80gb".'},
    'peak_fp32_tflops':num('Dense, non-tensor-core FP32 TFLOP/s.'),
    'peak_tf32_tflops':num('Dense TF32 TFLOP/s.'),
    'peak_bf16_tflops':num('Dense BF16 (and FP16) TFLOP/s.'),
    'peak_fp8_tflops':num('Dense FP8 TFLOP/s; 0 where the device has no FP8 tensor cores.'),
    'peak_fp4_tflops':num('Dense FP4 (NVFP4) TFLOP/s; 0 where the device has no FP4 tensor cores.'),
    'block_scaled_formats':{'type':'boolean','description':'Tensor cores with block scales (MXFP8, NVFP4): Blackwell.'},
    'nvlink_domain':{'type':'integer','description':'GPUs joined by NVLink (72 on NVL72 racks); 0: one node.'},
    'memory_bytes':num('Memory capacity, bytes.'),
    'memory_bandwidth':num('Memory bandwidth, bytes/s.'),
    'nvlink_bandwidth':num('Intra-node bus bandwidth per GPU, bytes/s.'),
    'network_bandwidth':num('Inter-node bandwidth per GPU, bytes/s.'),
    'nvlink_latency_s':num('Per collective step inside a node, s.'),
    'network_latency_s':num('Per collective step across nodes, s.'),
    'kernel_launch_s':num('Fixed cost per kernel, s.'),
    'num_sms':{'type':'integer','description':'Streaming multiprocessors (wave quantisation).'},
    'gemm_tile_m':{'type':'integer','description':'Output tile rows of the large-GEMM kernels.'},
    'gemm_tile_n':{'type':'integer','description':'Output tile columns of the large-GEMM kernels.'},
    'gemm_k_overhead':num('Per-tile prologue/epilogue cost, in K elements.'),
    'gemm_efficiency':num('Large BF16 GEMM: fraction of peak.'),
    'fp8_gemm_efficiency':num('Large FP8 GEMM: fraction of the FP8 peak.'),
    'attention_efficiency':num('Fused attention core: fraction of peak.'),
    'memory_efficiency':num('Streaming kernels: fraction of memory bandwidth.'),
    'comm_overlap_slowdown':num('Compute lost per second of communication hidden behind it.'),
    'host_memory':{'type':'boolean','description':'Ranks allocate host memory (the "cpu" device): no framework workspace term.'},
    'source':{'type':'string','description':'Where the figures come from.'}}}
schemas['CatalogPreset'] = {'type':'object','additionalProperties':False,
  'description':'A model preset (search/presets.h) with its architecture written out.',
  'properties':{'name':{'type':'string','description':'The value of model.preset.'},
                'model':{'allOf':[{'$ref':'#/components/schemas/ModelSpec'}],'description':'Every architecture field, as a job spec carries it.'}}}
schemas['Catalog'] = {'type':'object','additionalProperties':False,
  'description':'What a spec can name: presets, devices, precisions and training frameworks.',
  'properties':{'presets':{'type':'array','items':{'$ref':'#/components/schemas/CatalogPreset'}},
                'devices':{'type':'array','items':{'$ref':'#/components/schemas/CatalogDevice'}},
                'precisions':{'type':'array','items':{'type':'string'},'description':'Values of training.precision.'},
                'frameworks':{'type':'array','items':{'$ref':'#/components/schemas/CatalogFramework'},'description':'Values of training.framework, in the order error messages list them.'}}}
schemas['CatalogFramework'] = {'type':'object','additionalProperties':False,
  'description':'A training codebase (search/framework_profile.h).',
  'properties':{'name':{'type':'string','description':'The value of training.framework, e.g. "torchtitan".'},
                'export_format':{'type':'string','description':'The export format its layouts render in by default ("" where it has none: give one).'}}}
schemas['Error'] = {'type':'object','required':['code','status','message'],'properties':{
  'code':{'type':'integer','description':'The HTTP status.'},
  'status':{'type':'string','description':'The canonical (gRPC) status code name.','enum':['INVALID_ARGUMENT','UNAUTHENTICATED','PERMISSION_DENIED','NOT_FOUND','FAILED_PRECONDITION','ALREADY_EXISTS','RESOURCE_EXHAUSTED','UNIMPLEMENTED','UNAVAILABLE','DEADLINE_EXCEEDED','INTERNAL','UNKNOWN','CANCELLED','ABORTED','OUT_OF_RANGE','DATA_LOSS']},
  'message':{'type':'string'}}}

def err(desc): return {'description': desc, 'content': {'application/json': {'schema': {'$ref':'#/components/schemas/Error'}}}}
def ok(ref, desc='OK'): return {'description': desc, 'content': {'application/json': {'schema': {'$ref':'#/components/schemas/'+ref}}}}
common = {'401': err('Missing or invalid client token (when the server has one).'), '403': err('A worker token was used for the client API.'), '500': err('Internal error.'), '503': err('The coordinator is unavailable (e.g. shutting down).')}
idp = {'name':'id','in':'path','required':True,'schema':{'type':'string'},'description':'Job id.'}
sec = [{'bearer': []}]
paths = {
 '/v1/jobs': {
  'post': {'operationId':'SubmitJob','summary':'Submit a tuning job (training, or inference with `kind: inference`).','tags':['jobs'],'security':sec,
    'description':'The body is a SubmitJobRequest ({"spec": {...}}) or, for convenience, a bare JobSpec. The spec is read as `paratune submit` reads a spec file, with the same messages: unknown fields (with a suggestion), wrong types (a string for a bool), keys given twice, and invalid values are refused (400, naming the field). The job carries the spec resolved (a preset\'s architecture written out, defaults filled in). Bodies over 1 MiB get 413.',
    'requestBody':{'required':True,'content':{'application/json':{'schema':{'oneOf':[{'$ref':'#/components/schemas/SubmitJobRequest'},{'$ref':'#/components/schemas/JobSpec'}]}}}},
    'responses': dict({'200': ok('Job','The job, as created.'), '400': err('Invalid JSON, unknown field, or an invalid spec (the message names the field and the rule).'), '413': err('Body larger than 1 MiB.'), '429': err('Too many jobs queued.')}, **common)},
  'get': {'operationId':'ListJobs','summary':'List jobs, newest first.','tags':['jobs'],'security':sec,
    'parameters':[{'name':'page_size','in':'query','schema':{'type':'integer','minimum':0},'description':'At most this many jobs (0 = server default).'},
                  {'name':'page_token','in':'query','schema':{'type':'string'},'description':'next_page_token of the previous page.'},
                  {'name':'state','in':'query','schema':{'type':'string'},'description':'Only jobs in this state: a JobState name ("JOB_STATE_SUCCEEDED") or its short form ("succeeded").'}],
    'responses': dict({'200': ok('ListJobsResponse'), '400': err('Bad or unknown query parameter.')}, **common)}},
 '/v1/jobs/{id}': {'get': {'operationId':'GetJob','summary':'Get a job.','tags':['jobs'],'security':sec,'parameters':[idp],
    'responses': dict({'200': ok('Job'), '404': err('No such job.')}, **common)}},
 '/v1/jobs/{id}/results': {'get': {'operationId':'GetResults','summary':'Ranked layouts of a job.','tags':['jobs'],'security':sec,'parameters':[idp],
    'responses': dict({'200': ok('JobResults'), '404': err('No such job.'), '409': err('The job has no results yet.')}, **common)}},
 '/v1/jobs/{id}:cancel': {'post': {'operationId':'CancelJob','summary':'Cancel a job.','tags':['jobs'],'security':sec,'parameters':[idp],
    'description':'The body is optional: none, {} or {"id": "<the same id>"}. Anything else is refused (400, saying what was expected).',
    'requestBody':{'required':False,'content':{'application/json':{'schema':{'type':'object','properties':{'id':{'type':'string'}},'additionalProperties':False}}}},
    'responses': dict({'200': ok('Job','The job, cancelled.'), '404': err('No such job.'), '409': err('The job already finished.')}, **common)}},
 '/v1/jobs/{id}/results/{rank}:export': {'get': {'operationId':'ExportLayout','summary':'A ranked layout as Megatron-LM arguments, a NeMo override, an inference engine command or JSON.','tags':['jobs'],'security':sec,
    'description':'Training jobs: the text `paratune export --format megatron|nemo|deepspeed|torchtitan|automodel --rank RANK` prints for the same spec, byte for byte (search/exporters.cc renders them); json is the layout\'s RankedConfig. Inference jobs (`kind: inference`): the trtllm-serve, vllm serve or SGLang launch_server command of the serving layout (inference/exporters.cc); json is its InferenceRankedConfig. A format of the other kind is refused (400). Content-Disposition names a file.',
    'parameters':[idp,{'name':'rank','in':'path','required':True,'schema':{'type':'integer','minimum':1},'description':'1 = the best layout.'},
                  {'name':'format','in':'query','required':True,'schema':{'type':'string','enum':['megatron','nemo','deepspeed','torchtitan','automodel','json','trtllm','vllm','sglang']},'description':'megatron: pretrain_gpt.py arguments (text/plain); nemo: megatron_gpt_config.yaml overrides (application/yaml); deepspeed: ds_config.json (application/json); torchtitan: job config TOML (application/toml); automodel: NeMo AutoModel recipe keys (application/yaml); trtllm, vllm, sglang: the engine command (text/plain); json: the RankedConfig or InferenceRankedConfig.'}],
    'responses': dict({'200': {'description':'The export.','content':{'text/plain':{'schema':{'type':'string'}},'application/yaml':{'schema':{'type':'string'}},'application/json':{'schema':{'oneOf':[{'$ref':'#/components/schemas/RankedConfig'},{'$ref':'#/components/schemas/InferenceRankedConfig'}]}}}},
                       '400': err('Rank not a positive integer, format missing or unknown, a format of the other job kind, an unknown query parameter.'), '404': err('No such job, or no layout at this rank.'), '409': err('The job has no results yet.')}, **common)}},
 '/v1/catalog': {'get': {'operationId':'GetCatalog','summary':'Model presets, device profiles, precisions and training frameworks a spec can name, resolved.','tags':['catalog'],'security':sec,
    'responses': dict({'200': ok('Catalog'), '400': err('A query parameter was given (there are none).')}, **common)}},
 '/v1/workers': {'get': {'operationId':'ListWorkers','summary':'Registered workers.','tags':['workers'],'security':sec,
    'responses': dict({'200': ok('ListWorkersResponse')}, **common)}},
 '/healthz': {'get': {'operationId':'Health','summary':'Liveness.','tags':['ops'],'security':[],
    'responses': {'200': {'description':'Serving.','content':{'application/json':{'schema':{'type':'object','properties':{'status':{'type':'string','enum':['ok']}}}}}}}}},
 '/metrics': {'get': {'operationId':'Metrics','summary':'Prometheus metrics (text exposition format 0.0.4).','tags':['ops'],'security':[],
    'responses': {'200': {'description':'paratune_jobs, paratune_tasks, paratune_workers, paratune_rpc_latency_seconds, paratune_requests_total, paratune_jobs_by_kind, paratune_candidates_scored_total.','content':{'text/plain':{'schema':{'type':'string'}}}}}}},
 '/openapi.json': {'get': {'operationId':'OpenApi','summary':'This document.','tags':['ops'],'security':[],
    'responses': {'200': {'description':'OpenAPI 3 document.','content':{'application/json':{'schema':{'type':'object'}}}}}}},
}
doc = {'openapi':'3.0.3',
 'info':{'title':'ParaTune coordinator REST API','version':'v1',
   'description':'The Autotuner API (paratune.v1, see proto/paratune/v1/service.proto) over HTTP+JSON: the same messages as gRPC in the proto3 JSON mapping with the proto field names (snake_case); int64 fields are decimal strings; enums are their names. Every field is printed, defaults included. Errors are {"code": <HTTP status>, "status": "<CANONICAL_CODE>", "message": "..."}: INVALID_ARGUMENT 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403, NOT_FOUND 404, FAILED_PRECONDITION 409, RESOURCE_EXHAUSTED 429 (413 for an oversized body), UNIMPLEMENTED 501, UNAVAILABLE 503, others 500.'},
 'servers':[{'url':'/'}],
 'tags':[{'name':'jobs'},{'name':'catalog'},{'name':'workers'},{'name':'ops'}],
 'paths': paths,
 'components': {'securitySchemes': {'bearer': {'type':'http','scheme':'bearer','description':'The client token (--client-token-file), when the coordinator has one.'}}, 'schemas': schemas}}
open(os.path.join(ROOT, 'server', 'openapi.json'), 'w').write(json.dumps(doc, indent=2) + '\n')
