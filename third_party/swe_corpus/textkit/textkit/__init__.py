"""textkit: small text utilities."""
from textkit.case import camel_to_snake, snake_to_camel, title_case
from textkit.distance import hamming, levenshtein, similarity
from textkit.slug import slugify, truncate
from textkit.wrap import center, indent_lines, wrap

__all__ = ["camel_to_snake", "snake_to_camel", "title_case", "hamming", "levenshtein",
           "similarity", "slugify", "truncate", "center", "indent_lines", "wrap"]
