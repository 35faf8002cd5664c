"""What the protocol adapters share on the way to and from the canonical request: policy
fields, images, `n`, embedding jobs, model facts."""
