"""Security: who may connect and what travels protected (TLS, auth, permissions).

Authentication, permissions and owner-only files are off unless [auth] is set
(docs/security-auth.md)."""
