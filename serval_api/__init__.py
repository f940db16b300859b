"""The API service: records engines, corpora, builds and nodes, serves clients over gRPC and
REST in Serval's wire format, and routes inference work to inference nodes."""
