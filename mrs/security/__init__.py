"""Security: who may connect and what travels protected (TLS, auth, permissions)."""
