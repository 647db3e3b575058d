"""Who a client is: SASL authentication on SASL listeners (the exchange is independent of
the transport under it), the JAAS settings it reads, and the principal it names
(``Connection.principal``, which the ACL authorizer, metrics and log lines read)."""
