"""Generated gRPC stubs of the Tenure API (package tenure.v1). Do not edit: run generate.sh."""
