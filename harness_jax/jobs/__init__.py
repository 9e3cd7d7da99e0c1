"""Jobs: pipelines above the methods and the tables (a method's runs, then their report)."""
