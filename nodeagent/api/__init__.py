"""The contracts: what a check and a tuner implement (Check, Tuner, Change, Plan), the registry that
finds built-in and third-party ones, and the report document other tools read.
"""
