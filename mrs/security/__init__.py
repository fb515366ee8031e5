"""Security: who may connect and what travels protected (TLS, auth, permissions).

Authentication, permissions and owner-only files are off unless [auth] is set
(docs/security-auth.md).

Layer: above `group` (the gate reads message headers the group writes); may import
everything below it. `clients` imports only its `handshake` (SCRAM from the client's side).
"""
