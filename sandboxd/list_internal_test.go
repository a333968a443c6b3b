package sandboxd

import (
	"errors"
	"net/url"
	"reflect"
	"testing"
)

func TestPaginate(t *testing.T) {
	all := []int{1, 2, 3, 4, 5}
	tests := []struct {
		page, size int
		want       []int
		wantPg     Pagination
	}{
		{1, 2, []int{1, 2}, Pagination{Page: 1, PageSize: 2, TotalItems: 5, TotalPages: 3, HasNextPage: true}},
		{3, 2, []int{5}, Pagination{Page: 3, PageSize: 2, TotalItems: 5, TotalPages: 3}},
		{4, 2, []int{}, Pagination{Page: 4, PageSize: 2, TotalItems: 5, TotalPages: 3}},
		{1, 20, all, Pagination{Page: 1, PageSize: 20, TotalItems: 5, TotalPages: 1}},
	}
	for _, tt := range tests {
		got, pg := paginate(all, tt.page, tt.size)
		if !reflect.DeepEqual(got, tt.want) || pg != tt.wantPg {
			t.Errorf("paginate(page %d, size %d) = %v, %+v, want %v, %+v", tt.page, tt.size, got, pg, tt.want, tt.wantPg)
		}
	}
	if got, _ := paginate([]int(nil), 1, 20); got == nil {
		t.Errorf("paginate(nil) = nil, want an empty slice (it is sent as [])")
	}
}

func TestListQuery(t *testing.T) {
	q := url.Values{"state": {"Running, Paused", "", "Running"}, "pageSize": {"500"}}
	page, size, err := pageQuery(q)
	if err != nil || page != 1 || size != 200 {
		t.Fatalf("pageQuery = %d, %d, %v, want 1, 200, nil", page, size, err)
	}
	if got, want := stateQuery[State](q), map[State]bool{"Running": true, "Paused": true}; !reflect.DeepEqual(got, want) {
		t.Errorf("stateQuery = %v, want %v", got, want)
	}
	if _, _, err := pageQuery(url.Values{"page": {"0"}}); err == nil {
		t.Errorf("pageQuery(page=0) = nil error, want INVALID_REQUEST")
	}
}

func TestSandboxPort(t *testing.T) {
	sb := &sandbox{}
	s := &Server{sandboxes: map[string]*sandbox{"sb": sb}}
	if got, port, err := s.sandboxPort("sb", "8080"); err != nil || got != sb || port != 8080 {
		t.Fatalf("sandboxPort(sb, 8080) = %p, %d, %v, want %p, 8080, nil", got, port, err, sb)
	}
	if _, _, err := s.sandboxPort("nope", "8080"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("sandboxPort(nope) = %v, want ErrNotFound", err)
	}
	for _, port := range []string{"0", "65536", "x", ""} {
		var re *RequestError
		if _, _, err := s.sandboxPort("sb", port); !errors.As(err, &re) || re.Field != "port" {
			t.Errorf("sandboxPort(sb, %q) = %v, want a RequestError on port", port, err)
		}
	}
}
