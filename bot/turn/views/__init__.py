"""What chat commands and tools print: task and skill text, /link's texts, the Memory Pulse summary
and its PNG chart.

Pure functions of the values they are given; may import memory/'s view types and each other, nothing else of bot/.
"""
