"""What the bundled server and the load generator share; it imports neither.

The lowest room: metric families for hot paths (``families``) and their latency
grid (``buckets``), the garbage-collector policy (``gcpolicy``) and the host's
descriptor and accept-queue limits (``limits``).  ``target_server`` and the
harness both import these from here.
"""
