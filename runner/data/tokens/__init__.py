"""Text as token ids:"""
