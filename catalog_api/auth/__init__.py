"""Who may do what: OAuth2 clients and JWT bearer tokens, privileges per namespace, rate limits,
the loopback-only bind guard, and storage credentials vended per table."""
