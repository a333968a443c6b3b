// Package images is sandboxd's image store: images pulled from any OCI or
// Docker v2 registry with go-containerregistry, their layers kept in a
// content-addressed store on disk and shared by every sandbox.
//
// A Store keeps, under its directory:
//
//	layers/<algo>-<hex>/    one unpacked layer per compressed digest, in the
//	                        form overlayfs reads as a lower layer (whiteouts as
//	                        0/0 character devices, opaque directories marked
//	                        with the overlay.opaque xattr)
//	manifests/<hex>.json    one record per image manifest: repository, config
//	                        (Env, WorkingDir, User, Entrypoint, Cmd), layers
//	refs/<escaped ref>      the manifest digest a tag or digest reference names
//	tmp/                    layers being unpacked (removed at Open)
//
// Each layer is downloaded and unpacked once: concurrent pulls of one image,
// and of images that share layers, are done once (singleflight), and a layer
// is moved into layers/ only after its digest matched. Garbage collection
// removes the layers no image record references.
//
// A registry cannot fill the host's disk through the store: a layer's
// unpacked bytes (its decompressed stream, plus the holes of its sparse
// files) are counted as it is read, and unpacking stops at
// Config.MaxLayerBytes, or at Config.MaxImageBytes for the image's layers
// together, leaving nothing of the layer; holes (of PAX and GNU sparse
// entries, and any block of zeros) stay holes on disk; and a blob whose
// digest does not match, which shows when its last byte is read, leaves
// nothing either. Each stored layer records its unpacked bytes in the
// user.alineo.unpacked extended attribute of its directory.
//
// Of this module it imports nothing: only the standard library,
// golang.org/x/sys, golang.org/x/sync and github.com/google/go-containerregistry;
// it must not import sandboxd.
package images
