"""Task suites in SWE-bench format, sandboxes and evaluation. Arrives with issue 3."""
