"""What the bundled server and the load generator share; it imports neither.

The lowest room: metric families for hot paths (``families``) and their latency
grid (``buckets``), the garbage-collector policy (``gcpolicy``), the host's
descriptor and accept-queue limits (``limits``), and PNG writing and reading
(``images``: the harness's generated images, the server's count of them), and a
host's GPUs read through NVML as dcgm-exporter writes them (``nvml``: the
server's own GPU on its ``/metrics``, ``--gpu-metrics nvml``).
``target_server`` and the harness both import these from here.
"""
