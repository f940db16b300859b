"""Client webhooks: the durable outbox of build events (`outbox`), the address policy of payload
URLs (`addresses`) and the worker that delivers them (`delivery`), which claims due rows fairly
(`claims`), sends each POST (`sending`), records its outcome and retry (`outcomes`) and prunes
settled records (`retention`)."""
