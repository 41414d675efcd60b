"""The op library (`gdp.ops`): image ops written as TF functions, with per-op facts (precision
class, mapping class, range transfer, NumPy reference). Empty until the op-library issue lands;
it imports nothing of gdp."""
