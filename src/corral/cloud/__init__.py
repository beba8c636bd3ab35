"""Cloud providers: start and stop the machines of a cloud pool (base.py: the one protocol; one module each).

A provider's SDK is imported lazily, inside its module's functions: a server without boto3 runs every pool
but an `aws` one."""
