// Package safetensors reads and writes checkpoints in the safetensors format.
//
// A safetensors file is an 8-byte little-endian header length N, N bytes of
// JSON describing the tensors, and a data section holding their bytes:
//
//	{"name": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]},
//	 "__metadata__": {"format": "pt"}}
//
// Offsets are relative to the start of the data section (byte 8+N).
//
// Reading memory-maps the whole file read-only, so opening a multi-gigabyte
// checkpoint costs only the header parse and Data returns zero-copy views.
// Every header is validated before use: a corrupt or hostile file yields an
// error naming the file and tensor, never a panic or a huge allocation.
//
// Writing streams: WriteFile and WriteSharded write the header and then ask a
// callback for each tensor's bytes in turn, so a checkpoint never has to be
// held in memory. Files are written under a temporary name and renamed into
// place, so a failed write never leaves a partial file under the final name.
package safetensors
