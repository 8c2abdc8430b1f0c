"""Ingestion: readers, structure-aware hierarchical chunking, ACL stamping, bulk writes."""
