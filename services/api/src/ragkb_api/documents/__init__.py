"""Documents of a KB: uploads, batches, versions, labels, reference documents."""
