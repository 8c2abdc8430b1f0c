"""The corrective answer workflow and the glue that runs it for one query."""
