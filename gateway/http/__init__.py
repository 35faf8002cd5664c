"""HTTP plumbing every route shares: middleware, body and limits, connection caps, auth,
error rendering, the stream helper, shutdown."""
