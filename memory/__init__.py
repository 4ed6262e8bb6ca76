"""memgate's memory engine: a library that stores, distils and recalls what people said."""
