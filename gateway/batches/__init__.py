"""OpenAI's Files and Batch API: uploads, batches, the runner of their lines, their store."""
