-- wrk script: a ~2 KB Alertmanager webhook with a fresh fingerprint per request (no repeats).
local counter = 0
local token = os.getenv("BENCH_TOKEN") or ""
local template = [[{"version":"4","groupKey":"{}:{alertname=\"GPUXidError\"}","truncatedAlerts":0,"status":"firing","receiver":"gpu-remediator","groupLabels":{"alertname":"GPUXidError"},"commonLabels":{"alertname":"GPUXidError","modelName":"NVIDIA H200"},"commonAnnotations":{},"externalURL":"http://alertmanager:9093","alerts":[{"status":"firing","labels":{"alertname":"GPUXidError","Hostname":"gpu-node-%d","UUID":"GPU-8e6a1c2d-0000-4000-8000-%012d","gpu":"%d","modelName":"NVIDIA H200","pci_bus_id":"00000000:1B:00.0","xid":"13","pod":"trainer-%d","namespace":"ml","container":"main","job":"dcgm-exporter","instance":"127.0.0.9:9400","DCGM_FI_DRIVER_VERSION":"580.159.04","device":"nvidia%d","exported_namespace":"ml","exported_pod":"trainer-%d","exported_container":"main"},"annotations":{"summary":"Xid 13 on gpu-node-%d GPU %d","description":"Graphics engine exception reported by the driver; the application on this GPU should be restarted. See the Xid catalog for the recommended action and escalate if it repeats.","runbook_url":"https://runbooks.example/gpu/xid-13"},"startsAt":"2026-12-02T10:00:00Z","endsAt":"0001-01-01T00:00:00Z","generatorURL":"http://prometheus:9090/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS+%%3E+0&g0.tab=1","fingerprint":"%016x"}]}]]
local headers = {["Content-Type"] = "application/json"}
if token ~= "" then headers["Authorization"] = "Bearer " .. token end

-- Seeded: unseeded, every wrk run (the warm-up, then the measured run) drew the same offsets and so repeated
-- the previous run's fingerprints, which the controller stores as repeats and never decides.
math.randomseed(os.time())

function setup(thread)
  thread:set("offset", math.random(1, 1000000000))
end

request = function()
  counter = counter + 1
  local n = counter + (offset or 0) * 1000
  local node = n % 997
  local gpu = n % 8
  local body = string.format(template, node, n, gpu, n, gpu, n, node, gpu, n)
  return wrk.format("POST", "/api/v1/alerts", headers, body)
end

done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d duration_us=%d errors_status=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.duration, summary.errors.status,
    latency:percentile(50), latency:percentile(99)))
end
