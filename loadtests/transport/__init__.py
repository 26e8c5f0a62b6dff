"""The transport: the target, the HTTP/1.1 client, stamped socket reads, the httpx path, connect."""
