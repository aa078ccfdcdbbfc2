"""The contracts a check and a tuner implement (Check, Tuner, Change, Plan), for built-in and third-
party ones.
"""
