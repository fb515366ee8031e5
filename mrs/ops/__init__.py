"""The operator's side of one running group: status extras and the journal watch
(`group_ops`), Prometheus metrics (`metrics`), the web view (`web`, `web_page.html`)
on a small HTTP server (`http_endpoint`), and the automatic PCJ archive
(`pcj_retention`).

Layer: may import `group`, `security` and what they stand on; the server that owns it
is seen only through the `group_ops.OwningServer` protocol.
"""
