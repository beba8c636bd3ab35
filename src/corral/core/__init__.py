"""Pure domain: resources, requests, job states and errors. No I/O, no clock, no global randomness."""
