package caddymodule

import (
	"bytes"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
)

// formPrefix starts the placeholders of form fields:
// {http.tollgate.form.<field>} is the field of a urlencoded or multipart
// request body, so a zone can count a login form by the username typed
// into it.
const formPrefix = placeholderPrefix + "form."

// defaultFormMaxSize is how much of a body the form placeholders read
// when the handler's form_max_size is not set: far more than a login
// form needs, little enough to hold per request.
const defaultFormMaxSize = 64 << 10

// maxFormMaxSize bounds form_max_size.
const maxFormMaxSize = 16 << 20

// formFields serves the form placeholders of one request. The body is
// read once, at the first use, up to a bound: a body longer than that, or
// of another type, has no fields, so a key made of them falls back to the
// client ID. What was read is put back in front of the rest of the body,
// so the next handler (the upstream) gets the body byte for byte.
type formFields struct {
	r      *http.Request
	limit  int64
	read   bool
	values url.Values
}

// usesForm reports whether text holds a form placeholder.
func usesForm(text string) bool { return strings.Contains(text, "{"+formPrefix) }

// replace serves {http.tollgate.form.<field>}: the field's first value,
// empty when the body has none.
func (f *formFields) replace(key string) (any, bool) {
	name, ok := strings.CutPrefix(key, formPrefix)
	if !ok {
		return nil, false
	}
	if !f.read {
		f.read = true
		f.values = readForm(f.r, f.limit)
	}
	return f.values.Get(name), true
}

// readForm reads the fields of r's body, if it is a form of at most limit
// bytes, and leaves r.Body as it was for whoever reads it next.
func readForm(r *http.Request, limit int64) url.Values {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength > limit {
		return nil
	}
	mediaType, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mediaType != "application/x-www-form-urlencoded" && mediaType != "multipart/form-data" {
		return nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	r.Body = &rereadBody{Reader: io.MultiReader(bytes.NewReader(buf), r.Body), Closer: r.Body}
	if err != nil || int64(len(buf)) > limit {
		return nil // too large (or broken): no fields
	}
	if mediaType == "application/x-www-form-urlencoded" {
		values, err := url.ParseQuery(string(buf))
		if err != nil {
			return nil
		}
		return values
	}
	values := url.Values{}
	mr := multipart.NewReader(bytes.NewReader(buf), params["boundary"])
	for {
		part, err := mr.NextPart()
		if err != nil {
			break
		}
		if name := part.FormName(); name != "" && part.FileName() == "" {
			v, err := io.ReadAll(io.LimitReader(part, limit))
			if err == nil {
				values.Add(name, string(v))
			}
		}
		part.Close()
	}
	return values
}

// rereadBody is a request body whose start was read ahead: the part read,
// then the rest; closing it closes the original.
type rereadBody struct {
	io.Reader
	io.Closer
}
