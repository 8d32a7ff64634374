"""Local stand-ins that speak real venue protocols, for tests and the local demo.

Test support only: nothing in the product imports from here.
"""
